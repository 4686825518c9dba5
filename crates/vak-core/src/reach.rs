//! The fast path of a budget check: a gateway chat's chains bounded from
//! its bot's, so that only a chat that could be over the cap is composed.
//!
//! A shared save reaches every gateway chat with every role in every
//! trusted project: thousands of chains that differ from their bot's chain
//! (same project, role and directory, no chat) only by the chat's own
//! texts. Composing each costs tens of microseconds; bounding it costs a
//! few additions. The bound is an upper bound, never an estimate:
//!
//! - The prefix is cut before every section that starts with a heading
//!   (`## …`) or with the generated `Surface:` line, each cut after a line
//!   break and before a character that is neither a space nor `/`. The
//!   token count of a text is exactly the sum of the counts of its pieces
//!   cut there (the rule the token memo counts by), so the bot's count is
//!   the sum of its units' counts. That sum is checked, not assumed: a bot
//!   chain whose units do not add up to its count gives no base.
//! - A chat adds texts to four blocks only (identity, operating rules,
//!   guardrails, surface note), so every other unit of its chain is the
//!   bot's, byte for byte (the separators before those blocks do not depend
//!   on them: the capability contract always follows the first three, and
//!   a surface note is counted within the `Surface:` unit it follows).
//! - A unit the chat touches is bounded by its bytes (a token is at least
//!   one byte), and its bytes by the bot's unit plus what the chat's text
//!   can become: cleaned (which only removes), rendered as a list (at most
//!   [`RENDER_PER_LINE`] bytes more a line), contained
//!   ([`CONTAIN_PER_LINE`] bytes more a line of the whole block, as the
//!   chat's lines can change how the block's other lines are read, plus a
//!   closing fence no longer than the longest line) and headed.
//!
//! So `bot tokens − the touched units' tokens + the touched units' byte
//! bounds` is at least the chat chain's count. A chain whose bound is
//! within the cap fits; any other is composed exactly, and only a composed
//! chain is ever reported over.

use std::collections::HashMap;

use vak_prompt_blocks::{Block, Name};
use vak_prompt_budget::{BudgetReport, TokenMemo};
use vak_prompt_compose::ResolvedPrompt;
use vak_prompt_loader::Snapshot;

use crate::Selectors;
use crate::edit::{PlannedChain, Visited, path_text};

/// The blocks a gateway chat's prompts go to, and so the only ones whose
/// units a chat chain can change.
const CHAT_BLOCKS: [Block; 4] = Block::EDITABLE;

/// At most this many bytes are added to one line by containment
/// (backslashes over its readings, a heading nested two levels deeper, a
/// `Surface:` escaped), beyond one closing fence per text: held to it by a
/// property test on hostile texts, with room to spare.
const CONTAIN_PER_LINE: usize = 16;

/// At most this many bytes containment takes off one line (a heading
/// nested up to three levels shallower), so a contained text's raw length
/// is bounded by its own.
const UNCONTAIN_PER_LINE: usize = 3;

/// At most this many bytes rendering a guardrail list adds to a line: a
/// `- ` or a continuation's indent, and the line break between items.
const RENDER_PER_LINE: usize = 4;

/// Bytes of a heading, its separators and a join that a block may gain
/// when the chat's text is its first: more than any heading a chat's block
/// renders under (`## Operating rules`), the blank lines around it and an
/// interop file's join.
const HEADED: usize = 128;

/// Bytes, lines and longest line of a text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Shape {
    bytes: usize,
    lines: usize,
    longest: usize,
}

impl Shape {
    fn of(text: &str) -> Shape {
        if text.is_empty() {
            return Shape::default();
        }
        let (mut lines, mut longest) = (0, 0);
        for line in text.split('\n') {
            lines += 1;
            longest = longest.max(line.len());
        }
        Shape {
            bytes: text.len(),
            lines,
            longest,
        }
    }

    fn add(self, other: Shape) -> Shape {
        Shape {
            bytes: self.bytes + other.bytes,
            lines: self.lines + other.lines,
            longest: self.longest.max(other.longest),
        }
    }
}

/// One chat block's unit in a bot's chain.
#[derive(Debug, Clone, Copy, Default)]
struct Unit {
    /// The unit's bytes: its heading, text and the separator after it (0
    /// when the block renders nothing and no unit holds it).
    bytes: usize,
    /// Its tokens: its share of the bot chain's count.
    tokens: usize,
    /// The block's own text as rendered, in the unit.
    text: Shape,
}

/// A bot's chain, as what its chats' bounds start from.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    tokens: usize,
    cap: usize,
    units: [Unit; 4],
}

impl Base {
    /// The base `resolved` (counted as `report`, of which `rules_tokens`
    /// are the project's scoped rules, counted beside the prefix) makes,
    /// or `None` when its prefix is not cut where the bound needs it: then
    /// its chats are composed.
    pub(crate) fn of(
        resolved: &ResolvedPrompt,
        report: &BudgetReport,
        rules_tokens: usize,
        memo: &mut TokenMemo,
    ) -> Option<Base> {
        let sections = resolved.sections()?;
        let prefix = resolved.prefix.as_str();
        // Units start at every section but a surface note, which belongs
        // to the unit before it (the `Surface:` line's).
        let starts: Vec<usize> = sections
            .iter()
            .enumerate()
            .filter(|(index, (block, _))| *index == 0 || *block != Block::SurfaceNote)
            .map(|(_, (_, range))| range.start)
            .collect();
        let cut_ok = |at: usize| {
            at == 0
                || (prefix.as_bytes().get(at - 1) == Some(&b'\n')
                    && prefix[at..]
                        .chars()
                        .next()
                        .is_some_and(|c| !c.is_whitespace() && c != '/'))
        };
        if !starts.iter().all(|at| cut_ok(*at)) {
            return None;
        }
        let unit_end = |index: usize| starts.get(index + 1).copied().unwrap_or(prefix.len());
        let encoding = report.encoding;
        // Each unit counted once, and kept for the chat blocks' units.
        let unit_tokens: Vec<usize> = (0..starts.len())
            .map(|index| memo.count(encoding, &prefix[starts[index]..unit_end(index)]))
            .collect();
        let unit_at = |at: usize| {
            let index = starts.iter().rposition(|start| *start <= at)?;
            Some((starts[index]..unit_end(index), unit_tokens[index]))
        };
        // The additivity the bound stands on, checked on this chain against
        // the prefix's count in `report` (any count beyond the prefix's,
        // the scoped rules', is the same for its chats).
        let summed: usize = unit_tokens.iter().sum();
        if report.prefix_tokens.checked_sub(rules_tokens) != Some(summed) {
            return None;
        }
        let mut units = [Unit::default(); 4];
        for (slot, block) in units.iter_mut().zip(CHAT_BLOCKS) {
            let section = sections.iter().find(|(b, _)| *b == block);
            let unit = match (section, block) {
                (Some((_, range)), _) => unit_at(range.start),
                // A surface note the bot has not: the chat's joins the
                // `Surface:` unit.
                (None, Block::SurfaceNote) => sections
                    .iter()
                    .find(|(b, _)| *b == Block::Surface)
                    .and_then(|(_, range)| unit_at(range.start)),
                (None, _) => None,
            };
            // A surface note must follow its `Surface:` line.
            if block == Block::SurfaceNote && !sections.iter().any(|(b, _)| *b == Block::Surface) {
                return None;
            }
            if let Some((unit, tokens)) = unit {
                *slot = Unit {
                    bytes: unit.len(),
                    tokens,
                    text: Shape::of(section.map_or("", |(_, r)| &prefix[r.clone()])),
                };
            }
        }
        // A chat's first three blocks are followed by the contract's
        // section, whatever they hold: their separators do not change.
        if !sections
            .iter()
            .any(|(b, _)| *b == Block::CapabilityContract)
        {
            return None;
        }
        Some(Base {
            tokens: report.prefix_tokens,
            cap: report.cap,
            units,
        })
    }

    /// An upper bound of the prefix tokens of this bot's chain with
    /// `chat`'s texts added.
    fn bound(&self, chat: &ChatShapes) -> usize {
        let mut bound = self.tokens;
        for ((unit, block), added) in self.units.iter().zip(CHAT_BLOCKS).zip(chat.blocks) {
            if added == Shape::default() {
                continue;
            }
            let contained = |raw: usize, lines: usize, longest: usize| {
                raw + CONTAIN_PER_LINE * lines + longest + 1
            };
            let bytes = match block.composition() {
                // The chat's text wins: contained alone, beside what the
                // bot's unit holds (its old winner counted, not taken off).
                vak_prompt_blocks::Composition::NarrowestWins => {
                    unit.bytes + HEADED + contained(added.bytes, added.lines, added.longest)
                }
                // The chat's lines join the list, which is contained whole.
                _ => {
                    let before = unit.text;
                    let raw = before.bytes
                        + UNCONTAIN_PER_LINE * before.lines
                        + added.bytes
                        + RENDER_PER_LINE * added.lines
                        + 2;
                    let lines = before.lines + added.lines + 1;
                    let longest =
                        before.longest + UNCONTAIN_PER_LINE + added.longest + RENDER_PER_LINE;
                    unit.bytes - before.bytes + HEADED + contained(raw, lines, longest)
                }
            };
            bound = bound.saturating_sub(unit.tokens) + bytes;
        }
        bound
    }
}

/// What one chat contributes, per chat block.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChatShapes {
    blocks: [Shape; 4],
    bytes: usize,
}

/// What one gateway chat contributes, by the entry of the plans' list it
/// is.
#[derive(Debug, Clone)]
struct ChatSlot {
    bot: Name,
    chat: Name,
    /// `None`: a chat whose chain is not bounded, only composed.
    shapes: Option<ChatShapes>,
}

/// The bases and chat texts of one check: bots' chains by their selectors
/// (each under every trust the check applies), chats' shapes by their entry
/// in the plans' list of gateway entries (the same in every project).
#[derive(Debug, Default)]
pub(crate) struct Reach {
    bases: HashMap<Selectors, Vec<Option<Base>>>,
    chats: Vec<Option<ChatSlot>>,
    /// The bases last looked up, and for which chain: a check visits a
    /// bot's chats one after another.
    last: Option<(Selectors, Vec<Option<Base>>)>,
    /// How many chains were bounded rather than composed, for the log.
    pub(crate) bounded: usize,
}

/// Whether `a` and `b` select the same chain but for the chat, paths
/// compared as text ([`path_text`]).
fn same_but_chat(a: &Selectors, b: &Selectors) -> bool {
    a.bot == b.bot
        && a.agent == b.agent
        && a.surface == b.surface
        && path_text(&a.workdir) == path_text(&b.workdir)
        && a.force_untrusted == b.force_untrusted
        && a.project.as_str() == b.project.as_str()
        && a.home.as_str() == b.home.as_str()
}

impl Reach {
    /// Keep what bounds the chats of the bot chain `selectors` (under the
    /// `trust`-th trust of the check), if it is one: `report` counted it,
    /// `rules_tokens` of which are the project's scoped rules.
    pub(crate) fn note(
        &mut self,
        selectors: &Selectors,
        trust: usize,
        resolved: &ResolvedPrompt,
        report: &BudgetReport,
        rules_tokens: usize,
        memo: &mut TokenMemo,
    ) {
        if selectors.bot.is_none() || selectors.chat.is_some() {
            return;
        }
        let base = Base::of(resolved, report, rules_tokens, memo);
        let bases = self.bases.entry(selectors.clone()).or_default();
        if bases.len() <= trust {
            bases.resize(trust + 1, None);
        }
        bases[trust] = base;
        self.last = None;
    }

    /// `Some` when the chat chain `chain` is proved within the cap under
    /// each of `trusts` trusts from its bot's chain (noted before): what
    /// visiting it weighed. `None`: it must be composed.
    pub(crate) fn fits(
        &mut self,
        chain: PlannedChain<'_>,
        trusts: usize,
        snapshot: &mut Snapshot,
    ) -> Option<Visited> {
        let selectors = chain.selectors;
        let (entry, bot, chat) = (
            chain.entry?,
            selectors.bot.as_ref()?,
            selectors.chat.as_ref()?,
        );
        if self.chats.len() <= entry {
            self.chats.resize(entry + 1, None);
        }
        // Every plan of a check lists the same entries in the same order, so
        // a slot is filled once and read in order; its names are checked,
        // so a list read again and changed meanwhile is never misread.
        let slot = &mut self.chats[entry];
        let shapes = match slot {
            Some(known) if known.bot == *bot && known.chat == *chat => known.shapes?,
            _ => {
                let shapes = chat_shapes(snapshot, selectors, bot, chat);
                *slot = Some(ChatSlot {
                    bot: bot.clone(),
                    chat: chat.clone(),
                    shapes,
                });
                shapes?
            }
        };
        if !self
            .last
            .as_ref()
            .is_some_and(|(last, _)| same_but_chat(last, selectors))
        {
            let key = Selectors {
                chat: None,
                ..selectors.clone()
            };
            let bases = self.bases.get(&key).cloned().unwrap_or_default();
            self.last = Some((key, bases));
        }
        let bases = &self.last.as_ref()?.1;
        let mut tokens = 0;
        for trust in 0..trusts {
            let base = bases.get(trust)?.as_ref()?;
            let bound = base.bound(&shapes);
            if bound > base.cap {
                return None;
            }
            tokens = tokens.max(bound);
        }
        self.bounded += 1;
        Some(Visited {
            tokens,
            work: shapes.bytes / 4 + 1,
        })
    }
}

/// The shapes of what `chat` of `bot` contributes, or `None` when it
/// contributes to a block a chat's chain is not bounded for.
fn chat_shapes(
    snapshot: &mut Snapshot,
    selectors: &Selectors,
    bot: &Name,
    chat: &Name,
) -> Option<ChatShapes> {
    let mut shapes = ChatShapes::default();
    for contribution in snapshot.chat_contributions(&selectors.home, bot, chat) {
        let index = CHAT_BLOCKS.iter().position(|b| *b == contribution.block)?;
        if !contribution.imports.files.is_empty() {
            return None;
        }
        // As composing takes it: cleaned (other line breaks become LF),
        // then only trimmed.
        let shape = Shape::of(&vak_prompt_blocks::clean(&contribution.text).text);
        shapes.blocks[index] = shapes.blocks[index].add(shape);
        shapes.bytes += shape.bytes;
    }
    Some(shapes)
}

#[cfg(test)]
mod tests;

//! Every chain over its cap, gathered in one place: what a refused save,
//! reset, revert or trust names, what `--over-budget` accepts and records,
//! and what `vak prompts check --all` reports.
//!
//! A check never stops at the first chain over the cap: raising the cap or
//! shortening one file only to learn of the next is how a user loses an
//! afternoon. [`OverCap`] holds them all, grouped by project (the one the
//! command named first among equals) and largest first, and
//! [`OverCap::summary`] says each one with the user-owned layers at fault,
//! then the three ways out.

use std::fmt::Write as _;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::Escaped;
use vak_prompt_budget::BudgetReport;

/// One chain over its cap.
#[derive(Debug, Clone)]
pub struct OverChain {
    /// The chain, as [`describe_chain`](crate::describe_chain) names it:
    /// `surface cli, directory `services``.
    pub chain: String,
    /// The trusted project the chain is in, when it is not the project the
    /// command named (a shared save reaches every trusted project).
    pub project: Option<Utf8PathBuf>,
    /// Its budget, the prefix over `report.cap`.
    pub report: BudgetReport,
}

impl OverChain {
    /// A chain of the project the command named.
    pub fn here(chain: String, report: BudgetReport) -> Self {
        OverChain {
            chain,
            project: None,
            report,
        }
    }
}

/// Every chain a change or a check found over its cap: grouped by project
/// (groups ordered by their largest chain), each group largest first.
#[derive(Debug, Clone, Default)]
pub struct OverCap {
    chains: Vec<OverChain>,
}

impl OverCap {
    /// Add `over`, unless the same chain of the same project is already
    /// held (a chain visited twice keeps its larger count).
    pub fn push(&mut self, over: OverChain) {
        if let Some(held) = self
            .chains
            .iter_mut()
            .find(|c| c.chain == over.chain && c.project == over.project)
        {
            if over.report.prefix_tokens > held.report.prefix_tokens {
                *held = over;
            }
        } else {
            self.chains.push(over);
        }
        self.sort();
    }

    /// Add every chain of `other`.
    pub fn merge(&mut self, other: OverCap) {
        for over in other.chains {
            self.push(over);
        }
    }

    fn sort(&mut self) {
        use std::collections::HashMap;
        let mut largest: HashMap<Option<Utf8PathBuf>, usize> = HashMap::new();
        for c in &self.chains {
            let entry = largest.entry(c.project.clone()).or_default();
            *entry = (*entry).max(c.report.prefix_tokens);
        }
        self.chains.sort_by(|a, b| {
            let group = |c: &OverChain| largest.get(&c.project).copied().unwrap_or_default();
            group(b)
                .cmp(&group(a))
                .then_with(|| a.project.is_some().cmp(&b.project.is_some()))
                .then_with(|| a.project.cmp(&b.project))
                .then_with(|| b.report.prefix_tokens.cmp(&a.report.prefix_tokens))
                .then_with(|| a.chain.cmp(&b.chain))
        });
    }

    /// Whether no chain is over its cap.
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty()
    }

    /// How many chains are over.
    pub fn len(&self) -> usize {
        self.chains.len()
    }

    /// The chains, grouped by project, largest first.
    pub fn chains(&self) -> &[OverChain] {
        &self.chains
    }

    /// The largest chain over the cap.
    pub fn largest(&self) -> Option<&OverChain> {
        self.chains.iter().max_by_key(|c| c.report.prefix_tokens)
    }

    /// Each chain with its tokens and the user-owned layers at fault: what
    /// a change made over the cap, as asked, warns with.
    pub fn chains_text(&self) -> String {
        let mut out = format!(
            "{} chain{} over the cap (largest first):",
            self.chains.len(),
            if self.chains.len() == 1 {
                " is"
            } else {
                "s are"
            }
        );
        for (project, places) in self.places() {
            match project {
                None => out.push_str("\n  in this project:"),
                Some(project) => {
                    let _ = write!(
                        out,
                        "\n  in the trusted project `{}`:",
                        Escaped(project.as_str())
                    );
                }
            }
            for (place, chains) in places {
                // The largest chain of the place speaks for its layers.
                let r = &chains[0].report;
                let surfaces: Vec<String> = chains
                    .iter()
                    .map(|c| match surface_of(&c.chain) {
                        Some(kind) => {
                            format!("surface `{kind}`: {} tokens", c.report.prefix_tokens)
                        }
                        None => format!("{} tokens", c.report.prefix_tokens),
                    })
                    .collect();
                let _ = write!(
                    out,
                    "\n    {place}: over the cap of {} by up to {} ({})",
                    r.cap,
                    r.over_by(),
                    surfaces.join(", ")
                );
                let offenders = r.offenders();
                if offenders.is_empty() {
                    out.push_str(
                        "\n      (no user-owned layer contributes: the built-in prompt alone is over the cap)",
                    );
                }
                for layer in offenders {
                    let _ = write!(out, "\n      {layer}");
                }
                for layer in r.administrators_layers() {
                    let _ = write!(
                        out,
                        "\n      not yours to shorten: {layer} (set by the machine's administrator)"
                    );
                }
            }
        }
        out
    }

    /// The chains by project, then by place (the chain without its
    /// surface: the root, a directory, a role, a bot or chat), each in the
    /// order held (largest first), places by their largest chain.
    #[expect(clippy::type_complexity, reason = "a local grouping, read once")]
    fn places(&self) -> Vec<(Option<&Utf8PathBuf>, Vec<(String, Vec<&OverChain>)>)> {
        let mut out: Vec<(Option<&Utf8PathBuf>, Vec<(String, Vec<&OverChain>)>)> = Vec::new();
        for c in &self.chains {
            if out.last().is_none_or(|(p, _)| *p != c.project.as_ref()) {
                out.push((c.project.as_ref(), Vec::new()));
            }
            let Some((_, places)) = out.last_mut() else {
                continue;
            };
            let place = place_of(&c.chain);
            match places.iter_mut().find(|(p, _)| *p == place) {
                Some((_, chains)) => chains.push(c),
                None => places.push((place, vec![c])),
            }
        }
        out
    }

    /// One summary a user can act on: [`chains_text`](Self::chains_text),
    /// then the three ways out. `config` is the shared config file whose
    /// `[prompts] max_tokens` sets the cap; `override_hint` how this
    /// caller says `--over-budget`.
    pub fn summary(&self, config: &Utf8Path, override_hint: &str) -> String {
        let mut out = self.chains_text();
        // Under the managed ceiling, a larger shared cap changes nothing.
        if let Some(ceiling) = self
            .chains
            .iter()
            .find_map(|c| c.report.cap_ceiling.as_ref())
        {
            let _ = write!(
                out,
                "\nWays out: shorten the layers named (the cap is the managed layer's ceiling, `[prompts] max_tokens` in `{}`, which only the machine's administrator can raise); or pass {override_hint} to go ahead over the cap (recorded as such)",
                Escaped(ceiling.as_str())
            );
            return out;
        }
        let _ = write!(
            out,
            "\nWays out: shorten the layers named; raise `[prompts] max_tokens` in the shared config `{}`; or pass {override_hint} to go ahead over the cap (recorded as such)",
            Escaped(config.as_str())
        );
        out
    }
}

/// The plain warning `show`, `explain` and `session new` give for a prompt
/// over its cap (none when it is within it): they never refuse for it,
/// but nobody should learn of it from a later refused save. `config` is
/// the shared config file that sets the cap.
pub fn over_cap_warning(report: &BudgetReport, config: &Utf8Path) -> Option<String> {
    if !report.is_over() {
        return None;
    }
    let layers: Vec<String> = report.offenders().iter().map(ToString::to_string).collect();
    let raise = match &report.cap_ceiling {
        Some(ceiling) => format!(
            "; the cap is the managed layer's ceiling (`[prompts] max_tokens` in `{}`), which only the machine's administrator can raise",
            Escaped(ceiling.as_str())
        ),
        None => format!(
            ", or raise `[prompts] max_tokens` in the shared config `{}`",
            Escaped(config.as_str())
        ),
    };
    Some(format!(
        "this prompt is over its cap: the prefix is {} tokens, over the cap of {} by {}. Saves that make it longer are refused until it is back under: shorten {}{raise}",
        report.prefix_tokens,
        report.cap,
        report.over_by(),
        if layers.is_empty() {
            "nothing user-owned contributes".to_owned()
        } else {
            format!("one of its layers ({})", layers.join("; "))
        }
    ))
}

/// The surface a chain's name starts with (`surface `cli`, …` gives `cli`).
fn surface_of(chain: &str) -> Option<&str> {
    chain
        .strip_prefix("surface `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(kind, _)| kind)
}

/// A chain's name without its surface: `directory `web``, or `the root`.
fn place_of(chain: &str) -> String {
    match surface_of(chain) {
        Some(kind) => {
            let rest = &chain["surface `".len() + kind.len() + 1..];
            match rest.strip_prefix(", ") {
                Some(rest) if rest.starts_with("project trusted") => format!("the root, {rest}"),
                Some(rest) if !rest.is_empty() => rest.to_owned(),
                _ => "the root".to_owned(),
            }
        }
        None => chain.to_owned(),
    }
}

/// The shared config file of `home`, where `[prompts] max_tokens` is set.
pub fn shared_config(home: &Utf8Path) -> Utf8PathBuf {
    home.join(".vak").join("config.toml")
}

/// How a refusal names `--over-budget` for both callers.
pub const OVER_BUDGET_HINT: &str = "--over-budget (in the admin API, `\"over_budget\": true`)";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use vak_prompt_budget::lookup;

    fn report(tokens: usize, cap: usize) -> BudgetReport {
        let mut r = BudgetReport::measure(lookup("gpt-4o").unwrap(), cap, "", &[]);
        r.prefix_tokens = tokens;
        r
    }

    #[test]
    fn surfaces_of_one_place_are_said_on_one_line_largest_place_first() {
        let mut over = OverCap::default();
        for (chain, tokens) in [
            ("surface `cli`, directory `web`", 1700),
            ("surface `chat`", 2500),
            ("surface `chat`, directory `web`", 1800),
            ("surface `cli`", 2400),
        ] {
            over.push(OverChain::here(chain.to_owned(), report(tokens, 1500)));
        }
        let text = over.chains_text();
        assert!(text.starts_with("4 chains are over the cap"), "{text}");
        let root = text
            .find("the root: over the cap of 1500 by up to 1000 (surface `chat`: 2500 tokens, surface `cli`: 2400 tokens)")
            .expect(&text);
        let web = text
            .find("directory `web`: over the cap of 1500 by up to 300 (surface `chat`: 1800 tokens, surface `cli`: 1700 tokens)")
            .expect(&text);
        assert!(root < web, "{text}");
        assert_eq!(text.matches("directory `web`").count(), 1, "{text}");
    }

    proptest! {
        /// Whatever order chains arrive in, the summary holds every one
        /// once, grouped by project, groups by their largest, each group
        /// largest first.
        #[test]
        fn every_chain_once_grouped_largest_first(
            chains in proptest::collection::vec((0usize..4, 0usize..6, 1501usize..9000), 0..24)
        ) {
            let mut over = OverCap::default();
            let mut expected = std::collections::HashMap::new();
            for (project, chain, tokens) in &chains {
                let project = (*project > 0).then(|| Utf8PathBuf::from(format!("/p{project}")));
                let name = format!("surface `cli`, agent `r{chain}`");
                let e = expected.entry((project.clone(), name.clone())).or_insert(0);
                *e = (*e).max(*tokens);
                over.push(OverChain { chain: name, project, report: report(*tokens, 1500) });
            }
            prop_assert_eq!(over.len(), expected.len());
            for c in over.chains() {
                prop_assert_eq!(expected[&(c.project.clone(), c.chain.clone())], c.report.prefix_tokens);
            }
            // Groups are contiguous, by their largest, each largest first.
            let mut seen = Vec::new();
            let mut last_group_max = usize::MAX;
            for window in over.chains().chunk_by(|a, b| a.project == b.project) {
                prop_assert!(!seen.contains(&window[0].project), "group split");
                seen.push(window[0].project.clone());
                prop_assert!(window[0].report.prefix_tokens <= last_group_max);
                last_group_max = window[0].report.prefix_tokens;
                prop_assert!(window.windows(2).all(|w| w[0].report.prefix_tokens >= w[1].report.prefix_tokens));
            }
            let summary = over.summary(Utf8Path::new("/h/.vak/config.toml"), "--over-budget");
            for c in over.chains() {
                let place = place_of(&c.chain);
                let at = summary.find(&format!("    {place}: over the cap"));
                prop_assert!(at.is_some(), "{} missing:\n{}", place, summary);
                let line = format!("surface `cli`: {} tokens", c.report.prefix_tokens);
                prop_assert!(summary.contains(&line), "{} missing", line);
            }
            prop_assert!(summary.contains("max_tokens") && summary.contains("--over-budget"));
        }
    }
}

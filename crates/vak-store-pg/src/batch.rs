//! Group commit for continuing deliveries: the deliveries a node has
//! planned from memory wait in one queue, and whoever may start a batch
//! takes what is queued at that moment (no timer: never waiting for more to
//! come) and writes it in one call, so one transaction, one commit and one
//! WAL flush serve several deliveries.
//!
//! The queue knows nothing of SQL: it gathers [`Item`]s, hands a batch to
//! the caller's writer, and gives each waiting delivery its own
//! [`Outcome`]. What it guarantees:
//!
//! - at most one item per chat, per session and per signature in a batch
//!   (two of one chat would be planned from the same last turn; the second
//!   must see the first's turn, so it waits for the next batch);
//! - no item joins a batch while a batch being written holds its chat (it
//!   would wait on the chat's lock holding all of its own batch's);
//! - items are taken in the order they came, the first always unless its
//!   chat is being written, so an item waits behind at most the batches
//!   started before it was queued and those holding an earlier item of
//!   its chat;
//! - at most `leaders` batches are written at once, and a delivery is told
//!   its outcome only after the writer returned, which (for the store) is
//!   after the batch's commit: acknowledged means durable;
//! - a writer that panics answers its whole batch [`Outcome::Failed`] and
//!   frees its place, so no delivery waits for good.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

/// One continuing delivery, planned and encoded: `vak_continue_many`'s
/// arguments for it.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) bot: String,
    pub(crate) chat: String,
    pub(crate) session: String,
    /// The row of the last turn the plan was made from.
    pub(crate) last: Option<i64>,
    /// The home generation the prompt was resolved at, when checked.
    pub(crate) generation: Option<i64>,
    /// The signature's digest, when the delivery takes one.
    pub(crate) key: Option<String>,
    pub(crate) at: i64,
    pub(crate) window: i64,
    /// The turn's record, as written.
    pub(crate) record: String,
}

/// What became of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Committed as this row of `vak_records`.
    Written(i64),
    /// What the plan was made from no longer held: nothing written.
    Moved,
    /// The home side is no longer at the item's generation (now this, or
    /// `None` with its row gone): nothing written.
    Home(Option<i64>),
    /// The signature was already taken: nothing written.
    Replayed,
    /// The batch's statement failed on the server, so its transaction
    /// rolled back whole and nothing of it was written: the delivery goes
    /// alone on the ordinary path.
    Alone,
    /// The batch failed in a way that leaves its commit unknown (the
    /// connection lost, say): the delivery is not acknowledged, and the
    /// sender's retry finds its signature taken if it did commit.
    Failed(String),
}

/// What a batch's writer calls, once it has its connection, to take the
/// batch (once).
pub(crate) type Take<'a> = dyn FnMut() -> Vec<Arc<Pending>> + 'a;

/// A queued item and, once its batch is written, its outcome.
pub(crate) struct Pending {
    pub(crate) item: Item,
    outcome: OnceLock<Outcome>,
}

struct State {
    queue: VecDeque<Arc<Pending>>,
    leaders: usize,
    /// The items of the batches being written: an item of one of their
    /// chats waits until its batch is done, rather than joining another
    /// batch that would wait on the chat's lock holding all of its own.
    writing: Vec<Arc<Pending>>,
}

/// The queue of continuing deliveries waiting to be written.
pub(crate) struct Batcher {
    state: Mutex<State>,
    turn: Condvar,
    /// The most items in one batch.
    max_items: usize,
    /// The most batches written at once.
    leaders: usize,
}

impl Batcher {
    /// A queue writing at most `max_items` per batch and `leaders` batches
    /// at once (each at least 1).
    pub(crate) fn new(max_items: usize, leaders: usize) -> Self {
        Batcher {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                leaders: 0,
                writing: Vec::new(),
            }),
            turn: Condvar::new(),
            max_items: max_items.max(1),
            leaders: leaders.max(1),
        }
    }

    /// The most items in one batch.
    pub(crate) fn max_items(&self) -> usize {
        self.max_items
    }

    /// The most batches written at once.
    pub(crate) fn leaders(&self) -> usize {
        self.leaders
    }

    /// How many items are queued or in a batch being written.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        let state = self.lock();
        state.queue.len() + state.writing.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `item` and wait for its outcome. While its item is still
    /// queued and fewer than `leaders` batches are being written, the
    /// calling thread writes a batch itself: `write` gets the means to take
    /// one (call it once the connection is in hand, so that the batch holds
    /// everything queued while it waited for it) and answers one outcome
    /// per item taken, in order. Otherwise the thread sleeps until its item
    /// is answered or it may start a batch. A writer that took nothing (it
    /// got no connection) leaves its own item to be delivered alone:
    /// [`Outcome::Alone`].
    pub(crate) fn submit(
        &self,
        item: Item,
        write: &mut dyn FnMut(&mut Take<'_>) -> Vec<Outcome>,
    ) -> Outcome {
        let own = Arc::new(Pending {
            item,
            outcome: OnceLock::new(),
        });
        let mut state = self.lock();
        state.queue.push_back(Arc::clone(&own));
        loop {
            if let Some(outcome) = own.outcome.get() {
                return outcome.clone();
            }
            let queued = state.queue.iter().any(|p| Arc::ptr_eq(p, &own));
            if queued && state.leaders < self.leaders {
                state.leaders += 1;
                drop(state);
                let taken: RefCell<Option<Vec<Arc<Pending>>>> = RefCell::new(None);
                let guard = Leading {
                    batcher: self,
                    batch: &taken,
                };
                let mut take_now = || {
                    let mut state = self.lock();
                    let State { queue, writing, .. } = &mut *state;
                    let batch = take(queue, writing, self.max_items);
                    writing.extend(batch.iter().cloned());
                    *taken.borrow_mut() = Some(batch.clone());
                    batch
                };
                let outcomes = write(&mut take_now);
                let took = taken.borrow().as_ref().map(Vec::len);
                if let Some(batch) = &*taken.borrow() {
                    for (pending, outcome) in batch.iter().zip(outcomes) {
                        let _ = pending.outcome.set(outcome);
                    }
                }
                drop(guard);
                state = self.lock();
                match took {
                    // No connection: this delivery goes alone, whose own
                    // attempt reports why.
                    None => {
                        if let Some(at) = state.queue.iter().position(|p| Arc::ptr_eq(p, &own)) {
                            state.queue.remove(at);
                            return Outcome::Alone;
                        }
                    }
                    // Everything queued waits on another batch being
                    // written: wait for it rather than spin.
                    Some(0) => {}
                    Some(_) => continue,
                }
            }
            state = self
                .turn
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A batch being written: when dropped (also by a panicking writer) every
/// item it left unanswered is answered [`Outcome::Failed`], its place is
/// freed and the waiting deliveries are woken.
struct Leading<'a> {
    batcher: &'a Batcher,
    batch: &'a RefCell<Option<Vec<Arc<Pending>>>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let batch = self.batch.borrow_mut().take().unwrap_or_default();
        for pending in &batch {
            let _ = pending.outcome.set(Outcome::Failed(
                "the batch it was written in ended without an answer for it".to_owned(),
            ));
        }
        let mut state = self.batcher.lock();
        state.leaders -= 1;
        state
            .writing
            .retain(|p| !batch.iter().any(|b| Arc::ptr_eq(b, p)));
        drop(state);
        self.batcher.turn.notify_all();
    }
}

/// The next batch: queued items in order, skipping any whose chat, session
/// or signature is already in the batch or in one being written (`writing`;
/// they stay queued, in order), at most `max`. The first queued item is
/// taken unless a batch being written holds its chat.
fn take(
    queue: &mut VecDeque<Arc<Pending>>,
    writing: &[Arc<Pending>],
    max: usize,
) -> Vec<Arc<Pending>> {
    let mut batch: Vec<Arc<Pending>> = Vec::new();
    let mut left = VecDeque::with_capacity(queue.len());
    for pending in queue.drain(..) {
        let item = &pending.item;
        // A batch is a few items: a scan costs less than sets would.
        let clashes = batch.iter().chain(writing).any(|p| {
            let other = &p.item;
            (other.bot == item.bot && other.chat == item.chat)
                || other.session == item.session
                || (item.key.is_some() && other.key == item.key)
        });
        if batch.len() < max && !clashes {
            batch.push(pending);
        } else {
            left.push_back(pending);
        }
    }
    *queue = left;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn item(chat: &str, session: &str, key: Option<&str>) -> Item {
        Item {
            bot: "b".to_owned(),
            chat: chat.to_owned(),
            session: session.to_owned(),
            last: None,
            generation: None,
            key: key.map(str::to_owned),
            at: 0,
            window: 0,
            record: String::new(),
        }
    }

    fn queue(items: &[Item]) -> VecDeque<Arc<Pending>> {
        items
            .iter()
            .map(|item| {
                Arc::new(Pending {
                    item: item.clone(),
                    outcome: OnceLock::new(),
                })
            })
            .collect()
    }

    #[test]
    fn a_batch_holds_one_item_per_chat_session_and_signature_in_order() {
        let mut q = queue(&[
            item("1", "s1", Some("k1")),
            item("1", "s1", Some("k2")),
            item("2", "s1", Some("k3")),
            item("3", "s3", Some("k1")),
            item("4", "s4", None),
            item("5", "s5", None),
        ]);
        let batch = take(&mut q, &[], 3);
        let chats: Vec<_> = batch.iter().map(|p| p.item.chat.as_str()).collect();
        assert_eq!(chats, ["1", "4", "5"]);
        let left: Vec<_> = q.iter().map(|p| p.item.chat.as_str()).collect();
        assert_eq!(left, ["1", "2", "3"], "the rest stay queued in order");
        // Chat 1 (session s1, signature k1) is being written: every item
        // left clashes with it and waits for that batch.
        let writing = batch;
        assert!(take(&mut q, &writing, 3).is_empty());
        assert_eq!(q.len(), 3);
        let batch = take(&mut q, &[], 3);
        let chats: Vec<_> = batch.iter().map(|p| p.item.chat.as_str()).collect();
        assert_eq!(chats, ["1", "3"]);
    }

    proptest! {
        /// Whatever is queued, a batch is never empty while the queue is
        /// not, starts with the oldest item, holds no chat, session or
        /// signature twice, and loses or duplicates nothing.
        #[test]
        fn batches_take_the_oldest_first_and_never_two_of_one_chat(
            raw in proptest::collection::vec((0u8..4, 0u8..4, proptest::option::of(0u8..4)), 1..24),
            max in 1usize..6,
        ) {
            let items: Vec<Item> = raw
                .iter()
                .enumerate()
                .map(|(i, (c, s, k))| {
                    let mut it = item(&c.to_string(), &s.to_string(), None);
                    it.key = k.map(|k| k.to_string());
                    it.record = i.to_string();
                    it
                })
                .collect();
            let mut q = queue(&items);
            let mut seen = Vec::new();
            while !q.is_empty() {
                let oldest = q[0].item.record.clone();
                let batch = take(&mut q, &[], max);
                prop_assert!(!batch.is_empty() && batch.len() <= max);
                prop_assert_eq!(&batch[0].item.record, &oldest);
                let chats: HashSet<_> = batch.iter().map(|p| p.item.chat.clone()).collect();
                let sessions: HashSet<_> = batch.iter().map(|p| p.item.session.clone()).collect();
                let keys: Vec<_> = batch.iter().filter_map(|p| p.item.key.clone()).collect();
                let distinct: HashSet<_> = keys.iter().collect();
                prop_assert_eq!(chats.len(), batch.len());
                prop_assert_eq!(sessions.len(), batch.len());
                prop_assert_eq!(distinct.len(), keys.len());
                seen.extend(batch.iter().map(|p| p.item.record.clone()));
            }
            seen.sort_by_key(|r| r.parse::<usize>().unwrap_or(usize::MAX));
            let all: Vec<_> = (0..items.len()).map(|i| i.to_string()).collect();
            prop_assert_eq!(seen, all);
        }
    }

    #[test]
    fn concurrent_submissions_are_gathered_and_each_answered_its_own_outcome() {
        let batcher = Arc::new(Batcher::new(8, 1));
        let batches = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let batcher = Arc::clone(&batcher);
                let batches = Arc::clone(&batches);
                std::thread::spawn(move || {
                    let mut write = |take: &mut Take<'_>| {
                        let batch = take();
                        batches.lock().unwrap().push(batch.len());
                        // Long enough for the others to queue behind it.
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        batch
                            .iter()
                            .map(|p| Outcome::Written(p.item.chat.parse().unwrap()))
                            .collect()
                    };
                    batcher.submit(item(&i.to_string(), &i.to_string(), None), &mut write)
                })
            })
            .collect();
        for (i, thread) in threads.into_iter().enumerate() {
            assert_eq!(thread.join().unwrap(), Outcome::Written(i as i64));
        }
        let batches = batches.lock().unwrap();
        assert_eq!(batches.iter().sum::<usize>(), 16, "every item written once");
        assert!(batches.iter().all(|n| *n <= 8));
    }

    #[test]
    fn a_writer_that_panics_fails_its_batch_and_the_next_delivery_still_goes() {
        let batcher = Batcher::new(4, 1);
        let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            batcher.submit(item("1", "s1", None), &mut |take| {
                take();
                panic!("writer died")
            })
        }));
        assert!(hit.is_err());
        let outcome = batcher.submit(item("2", "s2", None), &mut |take| {
            vec![Outcome::Written(7); take().len()]
        });
        assert_eq!(outcome, Outcome::Written(7));
    }

    #[test]
    fn a_writer_answering_too_few_fails_the_rest() {
        let batcher = Batcher::new(4, 1);
        let outcome = batcher.submit(item("1", "s1", None), &mut |take| {
            take();
            Vec::new()
        });
        assert!(matches!(outcome, Outcome::Failed(_)));
    }

    /// With two batches allowed at once, a delivery to a chat whose batch
    /// is being written is not taken into a second batch: it waits, and
    /// is written after.
    #[test]
    fn a_chat_being_written_holds_its_next_delivery_back() {
        let batcher = Arc::new(Batcher::new(4, 2));
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let batcher = Arc::clone(&batcher);
            std::thread::spawn(move || {
                batcher.submit(item("1", "s1", None), &mut |take| {
                    let batch = take();
                    taken_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    vec![Outcome::Written(1); batch.len()]
                })
            })
        };
        taken_rx.recv().unwrap();
        let second = {
            let batcher = Arc::clone(&batcher);
            std::thread::spawn(move || {
                let mut sizes = Vec::new();
                let outcome = batcher.submit(item("1", "s1", None), &mut |take| {
                    let batch = take();
                    sizes.push(batch.len());
                    vec![Outcome::Written(2); batch.len()]
                });
                (outcome, sizes)
            })
        };
        release_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Outcome::Written(1));
        let (outcome, sizes) = second.join().unwrap();
        assert_eq!(outcome, Outcome::Written(2));
        assert_eq!(
            sizes.last(),
            Some(&1),
            "written in a batch of its own: {sizes:?}"
        );
        assert!(
            sizes[..sizes.len() - 1].iter().all(|n| *n == 0),
            "{sizes:?}"
        );
        assert_eq!(batcher.waiting(), 0);
    }

    #[test]
    fn a_writer_that_got_no_connection_leaves_its_delivery_to_go_alone() {
        let batcher = Batcher::new(4, 1);
        let outcome = batcher.submit(item("1", "s1", None), &mut |_| Vec::new());
        assert_eq!(outcome, Outcome::Alone);
        assert_eq!(batcher.waiting(), 0, "nothing left queued");
    }
}

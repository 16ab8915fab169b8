//! Property test of the credit book: for any sequence of grant / reserve / lease (new job, or
//! the stream's own job coming back under a new token) / unfilled slot / transport take /
//! settle (current, stale or unknown token) / lost / outbox leases overdue (released, the
//! book stalled) / transport poll (unstall) / close / hand-back / cancel, the credits add up:
//! free + reserved + held == granted, capped at `MAX_CREDITS`; and a cancel is told once
//! per lease, never ahead of it: one for a lease still in the outbox leaves with it.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// A lease as the test hands it to the book.
#[derive(Debug)]
struct L {
    id: String,
    token: String,
}

impl Lease for L {
    fn job_id(&self) -> &str {
        &self.id
    }
    fn token(&self) -> &str {
        &self.token
    }
}

#[derive(Clone, Debug)]
enum Op {
    Grant(i64),
    Reserve(usize),
    /// A reserved slot gets a job: a new one, or (Some) the job of a held lease again.
    Lease(Option<usize>),
    Unfilled,
    Take,
    /// Settle a held lease by pick; `stale` picks a token settled or replaced before.
    Settle {
        pick: usize,
        stale: bool,
    },
    Unknown,
    Lost(usize),
    Close,
    TakeAll,
    /// The outbox sweep at this many ms after the start (leases are due 0..100 ms after it).
    Overdue(u64),
    Unstall,
    /// A cancel for a held lease by pick (its holder is to be told).
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => prop_oneof![1i64..=20, 9_990i64..=10_000].prop_map(Op::Grant),
        3 => (1usize..80).prop_map(Op::Reserve),
        4 => proptest::option::of(any::<usize>()).prop_map(Op::Lease),
        1 => Just(Op::Unfilled),
        3 => Just(Op::Take),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(pick, stale)| Op::Settle { pick, stale }),
        1 => Just(Op::Unknown),
        1 => any::<usize>().prop_map(Op::Lost),
        1 => Just(Op::Close),
        1 => Just(Op::TakeAll),
        2 => (0u64..150).prop_map(Op::Overdue),
        2 => Just(Op::Unstall),
        2 => any::<usize>().prop_map(Op::Cancel),
    ]
}

fn cancel_of(q: &QueueName, id: &str, token: &str) -> CancelLease {
    CancelLease {
        queue: q.clone(),
        id: id.to_owned(),
        token: token.to_owned(),
        reason: "stop".into(),
        revoke_ms: 0,
    }
}

fn leased(id: &str, token: &str) -> L {
    L {
        id: id.to_owned(),
        token: token.to_owned(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn credits_add_up_for_any_sequence(start in 1i64..=10_000, ops in proptest::collection::vec(op(), 1..200)) {
        let q = QueueName::parse("q").expect("queue");
        let mut book: Book<L> = Book::new(start);
        let mut granted = start;
        // The model: token -> job id of each held lease; tokens no longer held.
        let mut held: BTreeMap<String, String> = BTreeMap::new();
        let mut gone: Vec<(String, String)> = Vec::new();
        let mut closed = false;
        let mut next = 0u64;
        let start = std::time::Instant::now();
        let mut stalled = false;
        // Tokens the transport took; tokens whose holder was told of a cancel; tokens whose
        // cancel waits in the outbox beside the lease.
        let (mut taken, mut told, mut riding) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for op in ops {
            match op {
                Op::Grant(n) => {
                    let added = book.grant(n);
                    let want = n.min(MAX_CREDITS - granted);
                    prop_assert_eq!(added, want);
                    granted += want;
                }
                Op::Reserve(k) => {
                    for _ in 0..k {
                        book.reserve();
                    }
                }
                Op::Lease(again) => {
                    if book.reserved == 0 {
                        continue;
                    }
                    next += 1;
                    let token = format!("t{next}");
                    let id = match again.filter(|_| !held.is_empty()) {
                        Some(pick) => held.values().nth(pick % held.len()).cloned().unwrap_or_default(),
                        None => format!("j{next}"),
                    };
                    let at = start + std::time::Duration::from_millis(next % 100);
                    let r = book.deliver(&q, leased(&id, &token), tracing::Span::none(), at);
                    prop_assert_eq!(r.is_err(), closed);
                    if !closed {
                        held.insert(token, id);
                    }
                }
                Op::Unfilled => book.unreserve(),
                Op::Take => {
                    if let Some((lj, cancel)) = book.take_outbox() {
                        prop_assert!(held.contains_key(&lj.token));
                        prop_assert_eq!(cancel.is_some(), riding.remove(&lj.token), "its cancel leaves with it");
                        if let Some(c) = cancel {
                            prop_assert_eq!(&c.token, &lj.token);
                        }
                        taken.insert(lj.token);
                    }
                }
                Op::Cancel(pick) => {
                    let target = held.iter().nth(pick % held.len().max(1)).map(|(t, i)| (t.clone(), i.clone()));
                    if let Some((token, id)) = target {
                        let want = if told.contains(&token) {
                            Tell::No
                        } else if taken.contains(&token) {
                            Tell::Now
                        } else {
                            Tell::AfterLease
                        };
                        if want == Tell::AfterLease {
                            riding.insert(token.clone());
                        }
                        prop_assert_eq!(book.tell_cancel(&cancel_of(&q, &id, &token)), want);
                        told.insert(token);
                    }
                    prop_assert_eq!(book.tell_cancel(&cancel_of(&q, "nope", "t0")), Tell::No);
                }
                Op::Settle { pick, stale } => {
                    let target = if stale && !gone.is_empty() {
                        Some(gone[pick % gone.len()].clone())
                    } else if !held.is_empty() {
                        held.iter().nth(pick % held.len()).map(|(t, i)| (t.clone(), i.clone()))
                    } else {
                        None
                    };
                    if let Some((token, id)) = target {
                        let r = book.settle(&q, &id, &token);
                        prop_assert_eq!(r.is_some(), held.remove(&token).is_some());
                        gone.push((token, id));
                    }
                }
                Op::Unknown => {
                    prop_assert!(book.settle(&q, "nope", "t0").is_none());
                }
                Op::Lost(pick) => {
                    if let Some(token) = held.keys().nth(pick % held.len().max(1)).cloned() {
                        book.mark_lost(&q, &token);
                        prop_assert!(book.renewable().iter().all(|(_, _, t)| *t != token));
                    }
                }
                Op::Close => {
                    let back = book.close();
                    if closed {
                        prop_assert!(back.is_empty());
                    }
                    for (_, id, token) in back {
                        prop_assert_eq!(held.remove(&token), Some(id.clone()));
                        gone.push((token, id));
                    }
                    closed = true;
                }
                Op::Overdue(after) => {
                    let now = start + std::time::Duration::from_millis(after);
                    let before = book.outbox_len();
                    let back = book.release_overdue(now);
                    prop_assert!(back.len() <= before);
                    stalled |= !back.is_empty();
                    for (_, id, token) in back {
                        prop_assert_eq!(held.remove(&token), Some(id.clone()));
                        gone.push((token, id));
                    }
                }
                Op::Unstall => {
                    prop_assert_eq!(book.unstall(), stalled);
                    stalled = false;
                }
                Op::TakeAll => {
                    let back = book.take_all();
                    prop_assert_eq!(back.len(), held.len());
                    for (_, id, token) in back {
                        gone.push((token, id));
                    }
                    held.clear();
                }
            }
            riding.retain(|t| held.contains_key(t));
            prop_assert!(book.free >= 0 && book.reserved >= 0);
            prop_assert_eq!(book.held_count(), held.len());
            prop_assert_eq!(book.granted(), granted, "free + reserved + held == granted");
            prop_assert!(granted <= MAX_CREDITS);
            prop_assert!(book.outbox_len() <= book.held_count());
            prop_assert!(book.outbox_len() + book.reserved as usize <= OUTBOX_LEASES);
            prop_assert!(!closed || book.outbox_len() == 0);
            prop_assert!(!stalled || !book.can_reserve(), "a stalled book leases no more");
        }
    }
}

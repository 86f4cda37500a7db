//! Waiting for members, fairly ([`KeyGroupBuilder::wait`](super::KeyGroupBuilder::wait)):
//! tickets per key.
//!
//! A creator that waits takes a *ticket* when it starts (the store's clock, then a fresh
//! id: a total order). While it finds a member owned by a live group, it queues: it writes
//! an *intent* (its ticket, and until when it holds) into the intent document of every
//! member ([`layout::group_intent`], in the member's entity group, never owned by a group)
//! whose intent is absent, expired, or of a younger ticket. A creator forms its group only
//! when no member is owned and no member holds a live intent of an older ticket than its
//! own (a creator that does not wait has no ticket: any live intent of another holds it
//! off, and it answers [`Error::Grouped`](crate::Error::Grouped) naming the waiter). The
//! commit that forms the group expects every member's intent document as read and deletes
//! the creator's own intents, so an intent written after the read makes it conflict. A
//! one-shot transaction without a group respects intents the same way.
//!
//! Why it is fair and deadlock-free: the creator holding the oldest live ticket is held
//! off by no intent, only by owners, and every owner ends (dissolved, or its lease
//! passes). Once its intents are written, no creator that starts later takes any of its
//! members, so it forms its group after the groups that owned them then have ended: a
//! large group is passed by at most the groups alive when it queued, however many small
//! ones keep coming. An intent holds for at most the waiter's lease
//! ([`KeyGroupBuilder::lease`](super::KeyGroupBuilder::lease)), renewed while it waits, so a waiter that dies holds nobody up for longer than a dead
//! group would. A waiter wakes when a group of its mapper (or a clone) is dissolved, and
//! otherwise looks again after a backoff that doubles up to [`MAX_BACKOFF`], never later
//! than its deadline.

use crate::document::{Document, Value, Versioned};
use crate::error::Error;
use crate::key::Key;
use std::cmp::Ordering;
use std::time::Duration;

/// The longest a waiter sleeps between two looks at its members.
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(50);

/// The property of an intent document that holds the ticket's time.
const TICKET: &str = "ticket";
/// The property that holds the ticket's id.
const ID: &str = "id";
/// The property that holds until when the intent holds (the store's clock).
const UNTIL: &str = "until";

/// A waiter's place in the queue: ordered by time, then id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ticket {
    pub(super) ms: u64,
    pub(super) id: String,
}

/// An intent as stored: a ticket, and until when it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Intent {
    pub(super) ticket: Ticket,
    pub(super) until_ms: u64,
}

impl Intent {
    /// The intent an intent document holds; `None` for one that is not well formed
    /// (which holds nobody).
    pub(super) fn of(doc: &Document) -> Option<Intent> {
        Some(Intent {
            ticket: Ticket {
                ms: doc.get(TICKET)?.as_u64()?,
                id: doc.get(ID)?.as_str()?.to_owned(),
            },
            until_ms: doc.get(UNTIL)?.as_u64()?,
        })
    }

    /// The intent document that holds it.
    pub(super) fn to_document(&self) -> Document {
        [
            (TICKET.to_owned(), Value::from(self.ticket.ms)),
            (ID.to_owned(), Value::from(self.ticket.id.clone())),
            (UNTIL.to_owned(), Value::from(self.until_ms)),
        ]
        .into()
    }

    /// Whether it holds off a creator with `ticket` (`None`: one that does not wait) at
    /// `now_ms`: it is live, of another waiter, and older than `ticket`.
    pub(super) fn holds_off(&self, ticket: Option<&Ticket>, now_ms: u64) -> bool {
        self.until_ms > now_ms
            && match ticket {
                None => true,
                Some(mine) => self.ticket.id != mine.id && self.ticket.cmp(mine) == Ordering::Less,
            }
    }

    /// The refusal a creator held off by it answers, for the member's intent document
    /// at `key`.
    pub(super) fn refusal(&self, key: &Key) -> Error {
        Error::Grouped {
            key: key.clone(),
            group: self.ticket.id.clone(),
            until_ms: self.until_ms,
        }
    }
}

/// The intent an intent document read as `found` holds, if any.
pub(super) fn intent_in(found: Option<&Versioned>) -> Option<Intent> {
    found.and_then(|doc| Intent::of(&doc.doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(ms: u64, id: &str, until_ms: u64) -> Intent {
        Intent {
            ticket: Ticket {
                ms,
                id: id.to_owned(),
            },
            until_ms,
        }
    }

    #[test]
    fn an_older_live_intent_of_another_holds_off_a_younger_ticket_only() {
        let older = intent(10, "a", 100);
        let younger = Ticket {
            ms: 20,
            id: "b".to_owned(),
        };
        let oldest = Ticket {
            ms: 5,
            id: "c".to_owned(),
        };
        assert!(older.holds_off(Some(&younger), 50));
        assert!(!older.holds_off(Some(&oldest), 50));
        assert!(!older.holds_off(Some(&older.ticket), 50), "its own intent");
        assert!(older.holds_off(None, 50), "a creator that does not wait");
        assert!(!older.holds_off(None, 100), "expired");
    }

    #[test]
    fn an_intent_reads_back_as_written_and_a_malformed_one_holds_nobody() {
        let written = intent(10, "a", 100);
        assert_eq!(Intent::of(&written.to_document()), Some(written));
        let malformed: Document = [(TICKET.to_owned(), Value::from("soon"))].into();
        assert_eq!(Intent::of(&malformed), None);
    }
}

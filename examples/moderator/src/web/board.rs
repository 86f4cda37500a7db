//! What the web app does with the store, apart from HTTP: ask, list, vote once per
//! visitor, respond. Generic over [`Poll`], the question kind: [`Question`] (votes over
//! 10 shards) or [`SingleQuestion`] (votes in one document, `serve --naive`).
//!
//! - A question is inserted under a fresh random id, then listed on the [`Board`] (a
//!   merge into one of its shards). A question whose listing failed stays unlisted and
//!   unseen; a listed id without a question is skipped.
//! - A vote is [`Mapper::update_once`] named after the visitor and the question: however
//!   often and from however many servers it is sent, it counts once.
//! - Merging a duplicate question into another moves its votes and marks its text in one
//!   transaction over both questions: a one-shot key group ([`Mapper::key_group`]), so no
//!   reader ever sees the votes counted twice or lost, and a crash leaves both questions
//!   as they were or both merged. On the embedded store, standalone Redis and PostgreSQL
//!   that is one commit expecting everything the merge read: a vote that lands between
//!   the merge's read and its commit makes the merge run again ([`Error::Contention`]).
//!   On a Redis Cluster the commit is a two-phase commit: a vote before it makes the
//!   merge run again as well, and one that meets the documents it holds meanwhile
//!   ([`Error::Grouped`]) waits for it to settle and is counted after it. Votes stay
//!   `update_once` and not a key group per vote: a hot question grouped for every vote
//!   would make all its other voters wait.

use crate::model::{Board, Question, Response, SingleQuestion, SingleResponse};
use autoshard::prelude::*;
use autoshard::{KeyedOutcome, Root};
use serde::Serialize;

/// The most characters of a question's text.
pub const MAX_QUESTION: usize = 280;
/// The most characters of a response's text.
pub const MAX_RESPONSE: usize = 1000;
/// The most characters of an author's name.
pub const MAX_AUTHOR: usize = 40;

/// A question kind of the web app, with its response kind.
pub trait Poll: Root<Id = u64> + Clone {
    /// Its responses.
    type Answer: Child<Parent = Self, Id = String> + Clone;

    /// The id of the [`Board`] listing questions of this kind (so that both kinds can
    /// share a store).
    const BOARD: u64;

    /// A new question with no votes.
    fn create(id: u64, text: String, author: String) -> Self;
    /// A new response to question `question`.
    fn answer(question: u64, id: String, author: String, text: String) -> Self::Answer;
    /// What a response holds: its id, author and text.
    fn parts(answer: &Self::Answer) -> (&str, &str, &str);
    /// The question as the API shows it.
    fn view(&self) -> QuestionView;
    /// One more vote (a `#[shard_method]`).
    fn vote(&mut self);
    /// Takes the votes of `duplicate`, whose text then says it is a duplicate of this one.
    fn absorb(&mut self, duplicate: &mut Self);
}

/// Implements [`Poll`] for a question kind and its response kind, which hold the same
/// fields (`id`, `text`, `author`, `votes`, `vote_up`; `id`, `question`, `author`, `text`).
macro_rules! poll {
    ($question:ident, $answer:ident, $board:expr) => {
        impl Poll for $question {
            type Answer = $answer;
            const BOARD: u64 = $board;

            fn create(id: u64, text: String, author: String) -> Self {
                $question::new(id, text, author, 0)
            }

            fn answer(question: u64, id: String, author: String, text: String) -> $answer {
                $answer {
                    id,
                    question,
                    author,
                    text,
                }
            }

            fn parts(answer: &$answer) -> (&str, &str, &str) {
                (&answer.id, &answer.author, &answer.text)
            }

            fn view(&self) -> QuestionView {
                QuestionView {
                    id: self.id,
                    text: self.text.clone(),
                    author: self.author.clone(),
                    votes: self.votes,
                }
            }

            fn vote(&mut self) {
                self.vote_up();
            }

            fn absorb(&mut self, duplicate: &mut $question) {
                let moved = duplicate.votes;
                self.add_votes(moved);
                duplicate.add_votes(-moved);
                let mark = format!("[duplicate of #{}] ", self.id);
                if !duplicate.text.starts_with(&mark) {
                    duplicate.text = format!("{mark}{}", duplicate.text);
                }
            }
        }
    };
}

poll!(Question, Response, Board::MAIN);
poll!(SingleQuestion, SingleResponse, Board::MAIN + 1);

/// A question as the API and the page show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct QuestionView {
    /// Its id.
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// Who asked.
    pub author: String,
    /// Its votes.
    pub votes: i64,
}

/// A response as the API and the page show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ResponseView {
    /// Its id.
    pub id: String,
    /// Who answered.
    pub author: String,
    /// The answer.
    pub text: String,
}

/// What a vote did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct VoteView {
    /// The question voted on.
    pub id: u64,
    /// Its votes as this vote saw them (counting it).
    pub votes: i64,
    /// Whether this request counted the vote (`false`: the visitor had voted already).
    pub counted: bool,
}

/// Why an input is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A text that is empty (after trimming) or longer than its limit.
    Length {
        /// Which field.
        field: &'static str,
        /// Its limit in characters.
        max: usize,
    },
    /// No question of that id.
    NoQuestion,
    /// A question merged into itself.
    SameQuestion,
}

/// `text` trimmed, if it holds 1 to `max` characters.
pub fn checked(field: &'static str, text: &str, max: usize) -> Result<String, Refused> {
    let text = text.trim();
    if text.is_empty() || text.chars().count() > max {
        return Err(Refused::Length { field, max });
    }
    Ok(text.to_owned())
}

/// An author's name: trimmed, at most [`MAX_AUTHOR`] characters, `anonymous` when empty.
pub fn author(name: Option<&str>) -> Result<String, Refused> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok("anonymous".to_owned()),
        Some(name) => checked("author", name, MAX_AUTHOR),
    }
}

/// Creates the board of `Q` if it is not there yet.
pub async fn open<Q: Poll, S: DocumentStore>(db: &Mapper<S>) -> Result<()> {
    match db
        .insert(&mut Board::new(Q::BOARD, std::collections::BTreeSet::new()))
        .await
    {
        Ok(()) | Err(Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every listed question, most votes first (then by id).
pub async fn leaderboard<Q: Poll, S: DocumentStore>(db: &Mapper<S>) -> Result<Vec<QuestionView>> {
    let board: Board = db.load(&Q::BOARD).await?;
    let ids: Vec<u64> = board.questions.into_iter().collect();
    let mut questions: Vec<QuestionView> = db
        .load_many::<Q>(&ids)
        .await?
        .into_iter()
        .flatten()
        .map(|q| q.view())
        .collect();
    questions.sort_by(|a, b| b.votes.cmp(&a.votes).then(a.id.cmp(&b.id)));
    Ok(questions)
}

/// Asks a question: inserts it under a fresh id and lists it.
pub async fn ask<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    text: String,
    author: String,
) -> Result<QuestionView> {
    loop {
        // Ids stay below 2^53, exact as JavaScript numbers.
        let id = rand::random_range(1..1_000_000_000_u64);
        let mut question = Q::create(id, text.clone(), author.clone());
        match db.insert(&mut question).await {
            Ok(()) => {
                db.apply(&Q::BOARD, |b: &mut Board| b.list(id)).await?;
                return Ok(question.view());
            }
            Err(Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
}

/// One question, or `None`.
pub async fn question<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    id: u64,
) -> Result<Option<QuestionView>> {
    match db.load::<Q>(&id).await {
        Ok(q) => Ok(Some(q.view())),
        Err(Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The responses to question `id`, oldest id first.
pub async fn responses<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    id: u64,
) -> Result<Vec<ResponseView>> {
    let mut answers: Vec<ResponseView> = db
        .children::<Q::Answer>(&id)
        .await?
        .iter()
        .map(|a| {
            let (id, author, text) = Q::parts(a);
            ResponseView {
                id: id.to_owned(),
                author: author.to_owned(),
                text: text.to_owned(),
            }
        })
        .collect();
    answers.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(answers)
}

/// `visitor`'s vote on question `id`, counted once however often it is sent.
pub async fn vote<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    id: u64,
    visitor: &str,
) -> Result<Result<VoteView, Refused>> {
    let op = format!("vote:{visitor}:{id}");
    let mut outcome = Err(Error::Invalid("no attempt".to_owned()));
    for _ in 0..GROUPED_WAITS {
        outcome = db
            .update_once(&id, &op, |q: &mut Q| {
                q.vote();
                q.view().votes
            })
            .await;
        // A merge owns the question for a moment: count the vote after it.
        if !matches!(outcome, Err(Error::Grouped { .. })) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    match outcome {
        Ok(KeyedOutcome::Applied(votes)) => Ok(Ok(VoteView {
            id,
            votes,
            counted: true,
        })),
        Ok(KeyedOutcome::AlreadyApplied) => {
            let votes = question::<Q, S>(db, id).await?.map_or(0, |q| q.votes);
            Ok(Ok(VoteView {
                id,
                votes,
                counted: false,
            }))
        }
        Err(Error::NotFound { .. }) => Ok(Err(Refused::NoQuestion)),
        Err(e) => Err(e),
    }
}

/// How many times a vote or a merge that meets a merge in progress waits 5 ms for it.
const GROUPED_WAITS: u32 = 400;

/// Merges question `duplicate` into question `into`: `into` takes its votes and its text
/// says it is a duplicate, both in one transaction over the two questions (a one-shot key
/// group). The merged question as it is now.
pub async fn merge<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    duplicate: u64,
    into: u64,
) -> Result<Result<QuestionView, Refused>> {
    if duplicate == into {
        return Ok(Err(Refused::SameQuestion));
    }
    let mut outcome = Err(Error::Invalid("no attempt".to_owned()));
    for _ in 0..GROUPED_WAITS {
        outcome = merge_once::<Q, S>(db, duplicate, into).await;
        if !matches!(
            outcome,
            Err(Error::Grouped { .. } | Error::Contention { .. })
        ) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    match outcome {
        Ok(merged) => Ok(Ok(merged)),
        Err(Error::NotFound { .. }) => Ok(Err(Refused::NoQuestion)),
        Err(e) => Err(e),
    }
}

/// One attempt of [`merge`].
async fn merge_once<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    duplicate: u64,
    into: u64,
) -> Result<QuestionView> {
    let mut txn = db
        .key_group()
        .member::<Q>(&duplicate)
        .member::<Q>(&into)
        .once()
        .await?;
    let mut both = txn.load_many::<Q>(&[duplicate, into]).await?;
    let [from, to] = &mut both[..] else {
        return Err(Error::Invalid("a merge loads two questions".to_owned()));
    };
    to.absorb(from);
    txn.save(from)?;
    txn.save(to)?;
    let merged = to.view();
    txn.commit().await?;
    Ok(merged)
}

/// Stores a response to question `id` by `author`.
pub async fn respond<Q: Poll, S: DocumentStore>(
    db: &Mapper<S>,
    id: u64,
    author: String,
    text: String,
) -> Result<Result<ResponseView, Refused>> {
    if question::<Q, S>(db, id).await?.is_none() {
        return Ok(Err(Refused::NoQuestion));
    }
    let answer_id = format!(
        "{}-{:08x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
        rand::random::<u32>()
    );
    let mut answer = Q::answer(id, answer_id.clone(), author.clone(), text.clone());
    db.insert(&mut answer).await?;
    Ok(Ok(ResponseView {
        id: answer_id,
        author,
        text,
    }))
}

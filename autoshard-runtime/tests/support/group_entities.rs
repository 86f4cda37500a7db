// Hand-written `Entity` and `Child` impls of an entity group, exactly what
// `#[derive(Entity)]` generates for `#[entity(group_shards = K)]` roots and
// `#[entity(parent = ...)]` children, for tests and doc examples of the runtime.
// Plain items only: doc examples `include!` this file.

use autoshard_runtime::{Document, Entity, FieldError};

fn __group_get<T: autoshard_runtime::__private::serde::de::DeserializeOwned>(doc: &Document, field: &str) -> Result<T, FieldError> {
    let value = doc.get(field).ok_or_else(|| FieldError::missing(field))?;
    autoshard_runtime::__private::serde_json::from_value(value.clone())
        .map_err(|e| FieldError::new(field, e))
}

/// A root whose group is spread over 8 sub-groups (`#[entity(group_shards = 8)]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Topic {
    pub id: u64,
    pub title: String,
}

impl Entity for Topic {
    type Id = u64;
    const KIND: &'static str = "Topic";
    const GROUP_SHARDS: u32 = 8;

    fn id(&self) -> &u64 {
        &self.id
    }

    fn to_document(&self) -> Result<Document, FieldError> {
        Ok([("title".to_owned(), self.title.clone().into())].into())
    }

    fn from_document(id: u64, doc: &Document) -> Result<Self, FieldError> {
        Ok(Topic { id, title: __group_get(doc, "title")? })
    }
}

/// A child of `Topic` (`#[entity(parent = Topic)]`, `#[parent] topic`).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub id: u64,
    pub topic: u64,
    pub text: String,
    pub likes: i64,
}

impl Entity for Reply {
    type Id = u64;
    const KIND: &'static str = "Reply";
    const GROUP_SHARDS: u32 = <Topic as Entity>::GROUP_SHARDS;
    const PARENT_KIND: Option<&'static str> = Some(<Topic as Entity>::KIND);

    fn id(&self) -> &u64 {
        &self.id
    }

    fn parent_key(&self) -> Option<autoshard_runtime::Key> {
        Some(Topic::key_for(&self.topic))
    }

    fn to_document(&self) -> Result<Document, FieldError> {
        Ok([
            ("topic".to_owned(), self.topic.into()),
            ("text".to_owned(), self.text.clone().into()),
            ("likes".to_owned(), self.likes.into()),
        ]
        .into())
    }

    fn from_document(id: u64, doc: &Document) -> Result<Self, FieldError> {
        Ok(Reply {
            id,
            topic: __group_get(doc, "topic")?,
            text: __group_get(doc, "text")?,
            likes: __group_get(doc, "likes")?,
        })
    }
}

impl autoshard_runtime::Child for Reply {
    type Parent = Topic;
    fn parent_id(&self) -> &u64 {
        &self.topic
    }
}

/// A root with a plain group (K = 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub id: u64,
}

impl Entity for Thread {
    type Id = u64;
    const KIND: &'static str = "Thread";

    fn id(&self) -> &u64 {
        &self.id
    }

    fn to_document(&self) -> Result<Document, FieldError> {
        Ok(Document::new())
    }

    fn from_document(id: u64, _: &Document) -> Result<Self, FieldError> {
        Ok(Thread { id })
    }
}

/// A child of `Thread`.
#[derive(Debug, Clone, PartialEq)]
pub struct Post {
    pub id: u64,
    pub thread: u64,
    pub points: i64,
}

impl Entity for Post {
    type Id = u64;
    const KIND: &'static str = "Post";
    const GROUP_SHARDS: u32 = <Thread as Entity>::GROUP_SHARDS;
    const PARENT_KIND: Option<&'static str> = Some(<Thread as Entity>::KIND);

    fn id(&self) -> &u64 {
        &self.id
    }

    fn parent_key(&self) -> Option<autoshard_runtime::Key> {
        Some(Thread::key_for(&self.thread))
    }

    fn to_document(&self) -> Result<Document, FieldError> {
        Ok([
            ("thread".to_owned(), self.thread.into()),
            ("points".to_owned(), self.points.into()),
        ]
        .into())
    }

    fn from_document(id: u64, doc: &Document) -> Result<Self, FieldError> {
        Ok(Post {
            id,
            thread: __group_get(doc, "thread")?,
            points: __group_get(doc, "points")?,
        })
    }
}

impl autoshard_runtime::Child for Post {
    type Parent = Thread;
    fn parent_id(&self) -> &u64 {
        &self.thread
    }
}

//! A sharded root group and a child, with the options in every accepted form.
use autoshard::prelude::*;

#[derive(Entity)]
#[entity(kind = "Q", group_shards = 8)]
struct Question {
    #[id]
    id: String,
}

#[derive(Entity)]
#[entity(parent = self::Question)]
#[entity(kind = "R")]
struct Response {
    #[id]
    id: uuid::Uuid,
    #[parent]
    question: String,
    text: String,
}

pub fn main() {
    assert_eq!(<Question as Entity>::GROUP_SHARDS, 8);
    assert_eq!(<Response as Entity>::GROUP_SHARDS, 8);
    assert_eq!(<Response as Entity>::PARENT_KIND, Some("Q"));
    let r = Response { id: uuid::Uuid::nil(), question: "42".into(), text: String::new() };
    assert_eq!(r.parent_key(), Some(Question::key_for(&"42".to_owned())));
    assert_eq!(<Response as Child>::parent_id(&r), "42");
}

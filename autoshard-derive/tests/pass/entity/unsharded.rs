use autoshard::prelude::*;

#[derive(Entity, Debug, PartialEq)]
#[entity(kind = "Person")]
struct User {
    #[id]
    id: uuid::Uuid,
    name: String,
    nickname: Option<String>,
    tags: Vec<String>,
}

pub fn main() {
    assert_eq!(User::KIND, "Person");
    assert!(User::PROPERTIES.is_empty());
    let user = User {
        id: uuid::Uuid::nil(),
        name: "ann".into(),
        nickname: None,
        tags: vec!["a".into()],
    };
    let doc = user.to_document().unwrap();
    assert_eq!(User::from_document(user.id, &doc).unwrap(), user);
}

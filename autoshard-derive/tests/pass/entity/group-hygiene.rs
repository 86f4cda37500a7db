// The entity-group items of `#[derive(Entity)]` name only `::core`, `::std` and
// `::autoshard::__private`: these local items shadow what an unqualified path would find.
#![allow(dead_code, non_camel_case_types)]
#![no_implicit_prelude]

extern crate autoshard;
extern crate std;

struct Result;
struct Ok;
struct Option;
struct Some;
struct None;
struct Vec;
struct Key;
struct Child;
struct Entity;
struct ParentId;
mod core {}

#[derive(::autoshard::Entity)]
#[entity(group_shards = 4)]
struct Question {
    #[id]
    id: u64,
}

#[derive(::autoshard::Entity)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: u64,
}

pub fn main() {
    let r = Response { id: 1, question: 2 };
    let parent = <Response as ::autoshard::Entity>::parent_key(&r);
    ::std::assert_eq!(parent, ::std::option::Option::Some(::autoshard::Key::new("Question", "2")));
    ::std::assert_eq!(<Response as ::autoshard::Entity>::GROUP_SHARDS, 4);
}

use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
enum Vote {
    Up,
    Down,
}

fn main() {}

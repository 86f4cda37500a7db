//! Behaviour of the code the macros generate, without a store: shard methods update the
//! aggregate and the shadow, the `Entity` hooks read, fold and reset them, and documents
//! round-trip.

use std::collections::BTreeSet;

use autoshard::FieldError;
use autoshard::entity::ShardHooks;
use autoshard::entity::Sharding;
use autoshard::prelude::*;
use autoshard::store::Value;
use serde_json::json;

use autoshard_test_support::board::Board;

const SCORE: usize = 0;
const PEAK: usize = 1;
const TAGS: usize = 2;

fn start() -> Board {
    Board::new(
        "b/1".to_owned(),
        "league".to_owned(),
        None,
        10,
        5,
        BTreeSet::from(["start".to_owned()]),
    )
}

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("hook values decode as the field type")
}

fn shadows(board: &Board) -> (i64, u64, BTreeSet<String>) {
    (
        decode(board.shadow_value(SCORE).unwrap()),
        decode(board.shadow_value(PEAK).unwrap()),
        decode(board.shadow_value(TAGS).unwrap()),
    )
}

/// A small deterministic generator, so the test needs no `rand` and never flakes.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

#[test]
fn describes_its_sharded_properties() {
    assert_eq!(Board::KIND, "Scoreboard");
    let names: Vec<_> = Board::PROPERTIES
        .iter()
        .map(|p| (p.name, p.stored_as, p.sharding))
        .collect();
    assert_eq!(
        names,
        [
            (
                "score",
                "shard_score",
                Sharding::Static {
                    shards: 4,
                    min: 1,
                    max: autoshard::entity::DEFAULT_MAX_SHARDS
                }
            ),
            ("peak", "shard_peak", Sharding::Dynamic),
            (
                "tags",
                "shard_tags",
                Sharding::Static {
                    shards: 3,
                    min: 1,
                    max: autoshard::entity::DEFAULT_MAX_SHARDS
                }
            ),
        ]
    );
    assert_eq!(Board::PROPERTIES[1].static_shards(), None);
}

#[test]
fn a_fresh_value_has_neutral_untouched_shadows() {
    let board = start();
    for property in 0..3 {
        assert!(!board.shadow_touched(property));
        assert_eq!(
            board.shadow_value(property).unwrap(),
            Board::neutral_value(property).unwrap()
        );
    }
    assert_eq!(shadows(&board), (0, 0, BTreeSet::new()));
    assert!(board.state().is_some());
}

#[test]
fn k_shard_method_calls_update_aggregate_and_shadow() {
    for k in [1, 2, 7, 40] {
        let mut board = start();
        let mut rng = Lcg(k);
        let (mut score, mut peak, mut tags) = (10_i64, 5_u64, BTreeSet::from(["start".to_owned()]));
        let (mut score_change, mut peak_change, mut tags_change) = (0_i64, 0_u64, BTreeSet::new());
        for _ in 0..k {
            match rng.next() % 3 {
                0 => {
                    let delta = i64::try_from(rng.next() % 21).unwrap() - 10;
                    board.add(delta);
                    score += delta;
                    score_change += delta;
                }
                1 => {
                    let value = rng.next() % 100;
                    board.observe(value);
                    peak = peak.max(value);
                    peak_change = peak_change.max(value);
                }
                _ => {
                    let tag = format!("t{}", rng.next() % 5);
                    let was_new = !tags.contains(&tag);
                    assert_eq!(board.tag(&tag), was_new, "the aggregate run's answer");
                    tags.insert(tag.clone());
                    tags_change.insert(tag);
                }
            }
        }
        assert_eq!(
            (board.score, board.peak, &board.tags),
            (score, peak, &tags),
            "k = {k}"
        );
        assert_eq!(
            shadows(&board),
            (score_change, peak_change, tags_change),
            "k = {k}"
        );
        assert_eq!(
            decode::<i64>(board.aggregate_value(SCORE).unwrap()),
            score,
            "k = {k}"
        );
    }
}

#[test]
fn the_second_run_answers_and_the_first_runs_on_the_shadow() {
    let mut board = start();
    // "start" is in the aggregate but not in the (neutral) shadow: the shadow run inserts
    // it, the aggregate run does not, and the method returns the aggregate run's `false`.
    assert!(!board.tag("start"));
    assert_eq!(shadows(&board).2, BTreeSet::from(["start".to_owned()]));
    assert!(board.tag("new"));
    // A shard method swaps every sharded field, so every shadow is touched afterwards;
    // the ones it did not change still hold their neutral value.
    assert!(board.shadow_touched(TAGS));
    assert!(board.shadow_touched(SCORE));
    assert_eq!(
        board.shadow_value(SCORE).unwrap(),
        Board::neutral_value(SCORE).unwrap()
    );
}

#[test]
fn reset_restores_neutral() {
    let mut board = start();
    board.add(3);
    board.observe(50);
    board.tag("x");
    for property in 0..3 {
        assert!(board.shadow_touched(property));
        board.reset_shadow(property);
        assert!(!board.shadow_touched(property));
        assert_eq!(
            board.shadow_value(property).unwrap(),
            Board::neutral_value(property).unwrap()
        );
    }
    assert_eq!((board.score, board.peak), (13, 50), "the aggregate is kept");
    board.add(1);
    assert_eq!(
        shadows(&board).0,
        1,
        "later changes start again from neutral"
    );
}

#[test]
fn folds_stored_values_and_shadows() {
    let mut board = start();
    board.add(2);
    board.observe(7);
    board.tag("b");

    assert_eq!(
        board.fold_shadow_into(SCORE, Some(&json!(40))).unwrap(),
        json!(42)
    );
    assert_eq!(board.fold_shadow_into(SCORE, None).unwrap(), json!(2));
    assert_eq!(
        board.fold_shadow_into(PEAK, Some(&json!(3))).unwrap(),
        json!(7)
    );
    assert_eq!(
        board.fold_shadow_into(PEAK, Some(&json!(9))).unwrap(),
        json!(9)
    );
    assert_eq!(
        board.fold_shadow_into(TAGS, Some(&json!(["a"]))).unwrap(),
        json!(["a", "b"])
    );
    assert_eq!(
        Board::fold_values(PEAK, &json!(4), &json!(2)).unwrap(),
        json!(4)
    );
    assert_eq!(
        Board::fold_values(SCORE, &json!(4), &json!(2)).unwrap(),
        json!(6)
    );

    // Loading: from_document starts at neutral, then folds every stored shard in.
    let mut loaded =
        Board::from_document("b/1".to_owned(), &start().to_document().unwrap()).unwrap();
    for stored in [json!(10), json!(5), json!(-1)] {
        loaded.fold_stored(SCORE, &stored).unwrap();
    }
    loaded.fold_stored(TAGS, &json!(["x", "y"])).unwrap();
    loaded.fold_stored(TAGS, &json!(["y", "z"])).unwrap();
    assert_eq!(loaded.score, 14);
    assert_eq!(loaded.tags.len(), 3);
    assert_eq!(shadows(&loaded), (0, 0, BTreeSet::new()));
}

#[test]
fn bad_values_and_indices_are_field_errors() {
    let mut board = start();
    // Errors name the property (the key of the document names where it is stored).
    let err = board.fold_stored(SCORE, &json!("many")).unwrap_err();
    assert_eq!(err.field, "score");
    let err = Board::fold_values(PEAK, &json!(-1), &json!(2)).unwrap_err();
    assert_eq!(err.field, "peak");
    assert!(board.shadow_value(3).is_err());
    assert!(board.fold_stored(3, &json!(1)).is_err());
    assert!(Board::neutral_value(99).is_err());
    assert!(!board.shadow_touched(3));
    board.reset_shadow(3); // out of range: nothing to reset, no panic
}

#[test]
fn documents_round_trip() {
    let mut board = start();
    board.note = Some("weekly".to_owned());
    board.add(4);
    let doc = board.to_document().unwrap();
    let keys: Vec<_> = doc.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["note", "title"],
        "no id, no sharded or hidden fields"
    );
    assert_eq!(doc["title"], json!("league"));

    let back = Board::from_document(board.id.clone(), &doc).unwrap();
    assert_eq!(back.id, "b/1");
    assert_eq!(back.title, "league");
    assert_eq!(back.note.as_deref(), Some("weekly"));
    assert_eq!(
        (back.score, back.peak, back.tags.len()),
        (0, 0, 0),
        "sharded fields start neutral"
    );
    assert!(!back.shadow_touched(SCORE));
    assert_eq!(board.key(), Board::key_for(&"b/1".to_owned()));
}

#[test]
fn malformed_documents_name_the_field() {
    let mut doc = start().to_document().unwrap();
    doc.insert("title".to_owned(), json!(17));
    let err = Board::from_document("x".to_owned(), &doc).unwrap_err();
    assert_eq!(err.field, "title");
    assert!(err.reason.contains("expected a string"), "{}", err.reason);

    doc.remove("title");
    let err = Board::from_document("x".to_owned(), &doc).unwrap_err();
    assert_eq!(err, FieldError::missing("title"));

    // An `Option` field may be absent.
    let mut doc = start().to_document().unwrap();
    doc.remove("note");
    let board = Board::from_document("x".to_owned(), &doc).unwrap();
    assert_eq!(board.note, None);
}

/// Struct update syntax works when the entity derives `Default`.
#[autoshard::sharded(constructor = with_all_fields)]
#[derive(Entity, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Counter {
    #[id]
    id: uuid::Uuid,
    #[shardable(neutral = 0)]
    hits: u32,
}

impl Counter {
    #[shard_method]
    fn hit(&mut self) -> u32 {
        self.hits += 1;
        self.hits
    }

    #[shard_fold]
    fn fold_hits(a: u32, b: u32) -> u32 {
        a + b
    }
}

#[test]
fn default_construction_and_renamed_constructor() {
    let mut counter = Counter {
        hits: 3,
        ..Default::default()
    };
    assert_eq!(counter.hit(), 4, "the aggregate run's value");
    assert_eq!(counter.shadow_value(0).unwrap(), json!(1));
    let other = Counter::with_all_fields(uuid::Uuid::nil(), 9);
    assert_eq!(other.hits, 9);
    // serde skips the hidden fields.
    assert_eq!(
        serde_json::to_value(&counter).unwrap(),
        json!({"id": "00000000-0000-0000-0000-000000000000", "hits": 4})
    );
}

/// An entity without sharded properties: the default hooks.
#[derive(Entity, Debug, PartialEq)]
struct Plain {
    #[id]
    id: i32,
    r#type: String,
}

#[test]
fn unsharded_entities_use_the_default_hooks() {
    let plain = Plain {
        id: 7,
        r#type: "t".to_owned(),
    };
    assert!(Plain::PROPERTIES.is_empty());
    assert!(plain.state().is_none());
    assert!(plain.shadow_value(0).is_err());
    let doc = plain.to_document().unwrap();
    assert_eq!(
        doc["type"],
        json!("t"),
        "raw identifiers are stored without `r#`"
    );
    assert_eq!(Plain::from_document(7, &doc).unwrap(), plain);
    assert_eq!(Plain::KIND, "Plain");
}

#[test]
fn a_panicking_shadow_run_restores_the_aggregates() {
    let mut board = start();
    // The shadow run sees score 0 (neutral) and panics; the aggregate run never starts.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| board.add_checked(-3)));
    assert!(result.is_err());
    assert_eq!(board.score, 10, "the aggregate is back in its field");
    assert_eq!(board.tags, BTreeSet::from(["start".to_owned()]));
    assert_eq!(shadows(&board), (0, 0, BTreeSet::new()));
}

/// `#[derive(Debug)]` on a sharded entity prints the fields the user wrote, not the
/// hidden shadow and state fields the rewrite adds.
#[test]
fn debug_shows_only_the_fields_the_user_wrote() {
    #[autoshard::sharded]
    #[derive(Entity, Clone, Debug)]
    struct Poll {
        #[id]
        id: u64,
        r#type: String,
        #[shardable(shards = 4, fold = sum)]
        votes: i64,
    }
    let poll = Poll::new(7, "yes/no".into(), 3);
    assert_eq!(
        format!("{poll:?}"),
        r#"Poll { id: 7, type: "yes/no", votes: 3 }"#
    );
    assert_eq!(format!("{poll:#?}").lines().count(), 5, "{poll:#?}");
}

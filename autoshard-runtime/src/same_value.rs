//! Whether a property encodes as a given JSON value, told without encoding it where it is
//! a scalar: what `apply` and `save` ask of every unsharded field on every call, to learn
//! that the main document is unchanged (`Entity::encodes_as`). [`same`] walks the value
//! as serde presents it and compares a scalar with the value it would encode as
//! (`serde_json::to_value`'s rules: integers as numbers, strings, characters and unit
//! variants as strings, `None` and units as `null`, newtypes and `Some` as what they
//! hold). Anything else it leaves to the caller, which encodes it and compares it whole
//! (`macro_support::encodes_as`), so that the answer, and any error, is the encoder's:
//! floats (which need the check of non-finite values), sequences, maps, structs, bytes,
//! 128-bit integers, and values that fail to serialize.

use crate::document::Value;
use serde::ser::{self, Impossible, Serialize};
use std::fmt;

/// Whether `value` encodes as `saved` (`false` when `saved` is `None`), where `value` is
/// a scalar; `None` for anything else.
pub(crate) fn same<T: Serialize + ?Sized>(value: &T, saved: Option<&Value>) -> Option<bool> {
    value.serialize(Same(saved)).ok()
}

/// A serializer answering whether the scalar it is given encodes as the value it holds.
struct Same<'a>(Option<&'a Value>);

impl Same<'_> {
    fn holds(self, encoded: &Value) -> bool {
        self.0 == Some(encoded)
    }

    fn text(self, text: &str) -> bool {
        matches!(self.0, Some(Value::String(s)) if s == text)
    }
}

/// The value is not one [`Same`] compares: it is encoded and compared whole.
#[derive(Debug)]
struct NotScalar;

impl fmt::Display for NotScalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a scalar")
    }
}

impl std::error::Error for NotScalar {}

impl ser::Error for NotScalar {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotScalar
    }
}

type Whole = Impossible<bool, NotScalar>;

impl ser::Serializer for Same<'_> {
    type Ok = bool;
    type Error = NotScalar;
    type SerializeSeq = Whole;
    type SerializeTuple = Whole;
    type SerializeTupleStruct = Whole;
    type SerializeTupleVariant = Whole;
    type SerializeMap = Whole;
    type SerializeStruct = Whole;
    type SerializeStructVariant = Whole;

    fn serialize_bool(self, v: bool) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::Bool(v)))
    }
    fn serialize_i8(self, v: i8) -> Result<bool, NotScalar> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<bool, NotScalar> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<bool, NotScalar> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::from(v)))
    }
    fn serialize_u8(self, v: u8) -> Result<bool, NotScalar> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<bool, NotScalar> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<bool, NotScalar> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::from(v)))
    }
    fn serialize_i128(self, _: i128) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_u128(self, _: u128) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_f32(self, _: f32) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_f64(self, _: f64) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_char(self, v: char) -> Result<bool, NotScalar> {
        Ok(self.text(v.encode_utf8(&mut [0; 4])))
    }
    fn serialize_str(self, v: &str) -> Result<bool, NotScalar> {
        Ok(self.text(v))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_none(self) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::Null))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<bool, NotScalar> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::Null))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<bool, NotScalar> {
        Ok(self.holds(&Value::Null))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<bool, NotScalar> {
        Ok(self.text(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<bool, NotScalar> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple(self, _: usize) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Whole, NotScalar> {
        Err(NotScalar)
    }
    fn collect_str<T: fmt::Display + ?Sized>(self, _: &T) -> Result<bool, NotScalar> {
        Err(NotScalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    /// `same` answers what encoding and comparing answers, for `value` against its own
    /// encoding, against nothing, and against each of `others`.
    fn answers_as_the_encoder<T: Serialize>(value: &T, others: &[Value]) {
        let encoded = serde_json::to_value(value).expect("encodes");
        assert_eq!(same(value, Some(&encoded)), Some(true), "{encoded}");
        assert_eq!(same(value, None), Some(false), "{encoded}");
        for other in others {
            let answer = same(value, Some(other));
            assert_eq!(answer, Some(*other == encoded), "{encoded} against {other}");
        }
    }

    /// `same` leaves `value` to the encoder.
    fn left_to_the_encoder<T: Serialize>(value: &T) {
        assert_eq!(same(value, Some(&Value::Null)), None);
        assert_eq!(same(value, None), None);
    }

    #[derive(Serialize)]
    struct Meters(u32);

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    enum Color {
        Red,
        Named(String),
    }

    #[derive(Serialize)]
    #[serde(transparent)]
    struct Wrapped {
        inner: String,
    }

    #[test]
    fn scalars_compare_as_their_encoding_compares() {
        let others = [
            Value::Null,
            Value::Bool(false),
            Value::from(0),
            Value::from(-1),
            Value::from(u64::MAX),
            Value::from(1.0),
            Value::from("a"),
            Value::from(""),
            Value::from("Red"),
            serde_json::json!([1]),
            serde_json::json!({"a": 1}),
        ];
        answers_as_the_encoder(&true, &others);
        answers_as_the_encoder(&0_i8, &others);
        answers_as_the_encoder(&-1_i64, &others);
        answers_as_the_encoder(&i64::MIN, &others);
        answers_as_the_encoder(&u64::MAX, &others);
        answers_as_the_encoder(&7_u16, &others);
        answers_as_the_encoder(&'a', &others);
        answers_as_the_encoder(&"a", &others);
        answers_as_the_encoder(&String::new(), &others);
        answers_as_the_encoder(&None::<String>, &others);
        answers_as_the_encoder(&Some("a"), &others);
        answers_as_the_encoder(&Some(Some(0_u8)), &others);
        answers_as_the_encoder(&(), &others);
        answers_as_the_encoder(&Unit, &others);
        answers_as_the_encoder(&Meters(0), &others);
        answers_as_the_encoder(&Color::Red, &others);
        answers_as_the_encoder(
            &Wrapped {
                inner: "a".to_owned(),
            },
            &others,
        );
    }

    #[test]
    fn other_values_are_left_to_the_encoder() {
        left_to_the_encoder(&1.0_f64);
        left_to_the_encoder(&1.5_f32);
        left_to_the_encoder(&Some(f64::NAN));
        left_to_the_encoder(&vec![1, 2]);
        left_to_the_encoder(&(1, 2));
        left_to_the_encoder(&Color::Named("x".to_owned()));
        left_to_the_encoder(&BTreeMap::from([("a", 1)]));
        left_to_the_encoder(&1_u128);
        left_to_the_encoder(&serde_bytes_like());
    }

    /// A value that serializes as bytes.
    fn serde_bytes_like() -> impl Serialize {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b"ab")
            }
        }
        Bytes
    }
}

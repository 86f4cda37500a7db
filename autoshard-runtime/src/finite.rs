//! Whether a value holds a float that is not finite (NaN or infinite), which JSON cannot
//! hold: `serde_json` writes such a float as `null`, so the property would be stored as
//! `null` and fail every read of the entity after. [`has_non_finite`] walks the value as
//! serde presents it, allocating nothing; the encoder of properties asks it only about a
//! value whose JSON holds a `null` (`macro_support::encode`).

use serde::ser::{self, Serialize};
use std::fmt;

/// Whether `value` holds a float that is not finite anywhere (also inside sequences,
/// maps, structs and enum variants).
pub(crate) fn has_non_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    matches!(value.serialize(Finder), Err(Found::NonFinite))
}

/// Why the walk stopped: a float that is not finite, or a value that failed to serialize
/// (which the encoder reports on its own).
#[derive(Debug)]
enum Found {
    NonFinite,
    Other,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Found::NonFinite => "a float that is not finite",
            Found::Other => "a value that does not serialize",
        })
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Found::Other
    }
}

/// The walk: every scalar but a non-finite float is fine; compound values walk their
/// parts.
struct Finder;

fn float(value: f64) -> Result<(), Found> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(Found::NonFinite)
    }
}

macro_rules! fine {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<(), Found> { Ok(()) })*
    };
}

impl ser::Serializer for Finder {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Finder;
    type SerializeTuple = Finder;
    type SerializeTupleStruct = Finder;
    type SerializeTupleVariant = Finder;
    type SerializeMap = Finder;
    type SerializeStruct = Finder;
    type SerializeStructVariant = Finder;

    fine!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_f32(self, value: f32) -> Result<(), Found> {
        float(f64::from(value))
    }
    fn serialize_f64(self, value: f64) -> Result<(), Found> {
        float(value)
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        value.serialize(Finder)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        value.serialize(Finder)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        value.serialize(Finder)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple(self, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finder, Found> {
        Ok(Finder)
    }
}

/// The parts of a compound value, each walked in turn.
macro_rules! parts {
    ($($trait:ident :: $method:ident ($($name:ident: $ty:ty),*)),* $(,)?) => {
        $(impl ser::$trait for Finder {
            type Ok = ();
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, $($name: $ty,)* value: &T) -> Result<(), Found> {
                $(let _ = $name;)*
                value.serialize(Finder)
            }
            fn end(self) -> Result<(), Found> {
                Ok(())
            }
        })*
    };
}

parts!(
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(key: &'static str),
    SerializeStructVariant::serialize_field(key: &'static str),
);

impl ser::SerializeMap for Finder {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Found> {
        key.serialize(Finder)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        value.serialize(Finder)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::has_non_finite;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Reading {
        label: String,
        values: Vec<Option<f64>>,
        by_name: BTreeMap<String, (f32, i64)>,
    }

    #[test]
    fn finds_a_float_that_is_not_finite_wherever_it_sits() {
        let reading = |value: f64, single: f32| Reading {
            label: "x".into(),
            values: vec![None, Some(1.5), Some(value)],
            by_name: [("a".to_owned(), (single, 3))].into(),
        };
        assert!(!has_non_finite(&reading(2.0, 1.0)));
        assert!(has_non_finite(&reading(f64::NAN, 1.0)));
        assert!(has_non_finite(&reading(f64::INFINITY, 1.0)));
        assert!(has_non_finite(&reading(2.0, f32::NEG_INFINITY)));
        assert!(has_non_finite(&f64::NAN));
        assert!(!has_non_finite(&Option::<f64>::None));
    }
}

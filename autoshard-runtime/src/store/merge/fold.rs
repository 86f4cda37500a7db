//! The built-in folds a store applies itself ([`Fold`]): exact integer sums, maxima and
//! minima within the property type's range, and unions of sets of strings or of
//! integers; and the integers of JSON values they fold.

use crate::document::Value;

/// A fold a store can apply itself, with the range of values the property's type holds:
/// a store folds only into a stored value of that type, so a value the entity could not
/// read is never folded into (the merge answers [`Merged::Unsupported`](super::Merged::Unsupported), and the mapper's
/// read and compare-and-set then reports it as [`Error::Malformed`](crate::Error::Malformed)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fold {
    /// Integer sum, exact; a result outside `min..=max` (the field type's range) is an
    /// overflow.
    Sum {
        /// The smallest value the property's type holds.
        min: i128,
        /// The largest value the property's type holds.
        max: i128,
    },
    /// The larger integer, of integers within `min..=max`.
    Max {
        /// The smallest value the property's type holds.
        min: i128,
        /// The largest value the property's type holds.
        max: i128,
    },
    /// The smaller integer, of integers within `min..=max`.
    Min {
        /// The smallest value the property's type holds.
        min: i128,
        /// The largest value the property's type holds.
        max: i128,
    },
    /// The union of two sets stored as arrays (no duplicates) of `elements`.
    Union {
        /// What the set's elements are.
        elements: Elements,
    },
}

/// The elements of a set a [`Fold::Union`] folds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elements {
    /// Strings.
    Strings,
    /// Integers within `min..=max`.
    Integers {
        /// The smallest value the element type holds.
        min: i128,
        /// The largest value the element type holds.
        max: i128,
    },
}

impl Elements {
    fn takes(self, value: &Value) -> bool {
        match self {
            Elements::Strings => value.is_string(),
            Elements::Integers { min, max } => in_range(value, min, max),
        }
    }
}

impl Fold {
    /// [`Fold::Sum`] over the range of `i64`.
    pub const SUM_I64: Fold = Fold::Sum {
        min: i64::MIN as i128,
        max: i64::MAX as i128,
    };
    /// [`Fold::Max`] over the range of `i64`.
    pub const MAX_I64: Fold = Fold::Max {
        min: i64::MIN as i128,
        max: i64::MAX as i128,
    };
    /// [`Fold::Min`] over the range of `i64`.
    pub const MIN_I64: Fold = Fold::Min {
        min: i64::MIN as i128,
        max: i64::MAX as i128,
    };
    /// [`Fold::Union`] of sets of strings.
    pub const UNION_STRINGS: Fold = Fold::Union {
        elements: Elements::Strings,
    };

    /// Whether the store-level fold takes `value` as an operand: as a stored value
    /// ([`Fold::supports`]), except that the change a sum adds may be any integer of
    /// `i64` or `u64` (a decrement of an unsigned counter is negative).
    #[must_use]
    pub fn takes_operand(self, value: &Value) -> bool {
        match self {
            Fold::Sum { .. } => integer(value).is_some(),
            _ => self.supports(value),
        }
    }

    /// Whether the store-level fold takes `value` as a stored value: an integer within
    /// the fold's range, or an array of the union's elements.
    #[must_use]
    pub fn supports(self, value: &Value) -> bool {
        match self {
            Fold::Sum { min, max } | Fold::Max { min, max } | Fold::Min { min, max } => {
                in_range(value, min, max)
            }
            Fold::Union { elements } => value
                .as_array()
                .is_some_and(|items| items.iter().all(|item| elements.takes(item))),
        }
    }

    /// `fold(stored, operand)` on encoded values: `Ok(None)` when either is not a value
    /// this fold takes ([`Fold::supports`], [`Fold::takes_operand`]),
    /// [`FoldError::Overflow`] for a sum out of bounds.
    pub fn fold(self, stored: &Value, operand: &Value) -> Result<Option<Value>, FoldError> {
        if !self.supports(stored) || !self.takes_operand(operand) {
            return Ok(None);
        }
        let folded = match self {
            Fold::Sum { min, max } => {
                let (a, b) = (integer(stored), integer(operand));
                let sum = a
                    .zip(b)
                    .and_then(|(a, b)| a.checked_add(b))
                    .filter(|s| (min..=max).contains(s))
                    .ok_or(FoldError::Overflow { min, max })?;
                integer_value(sum)
            }
            Fold::Max { .. } | Fold::Min { .. } => {
                let (a, b) = (integer(stored), integer(operand));
                let pick_stored = if matches!(self, Fold::Max { .. }) {
                    a >= b
                } else {
                    a <= b
                };
                if pick_stored {
                    stored.clone()
                } else {
                    operand.clone()
                }
            }
            Fold::Union { .. } => {
                let mut items = Vec::new();
                let all = stored.as_array().into_iter().flatten();
                for item in all.chain(operand.as_array().into_iter().flatten()) {
                    if !items.contains(item) {
                        items.push(item.clone());
                    }
                }
                Value::Array(items)
            }
        };
        Ok(Some(folded))
    }

    /// How the stores' server-side merges (`lua/merge.lua`, `schema.sql`) name this fold:
    /// `sum`, `max`, `min`, `union-strings` or `union-integers`, with the range of the
    /// property's type (of the set's elements) as decimal text (`0` and `0` for a set of
    /// strings).
    #[must_use]
    pub fn script_arguments(self) -> (&'static str, String, String) {
        let (name, min, max) = self.name_and_range();
        (name, min.to_string(), max.to_string())
    }

    /// [`Fold::script_arguments`] with the range as numbers.
    pub(crate) fn name_and_range(self) -> (&'static str, i128, i128) {
        let (name, (min, max)) = match self {
            Fold::Sum { min, max } => ("sum", (min, max)),
            Fold::Max { min, max } => ("max", (min, max)),
            Fold::Min { min, max } => ("min", (min, max)),
            Fold::Union {
                elements: Elements::Strings,
            } => ("union-strings", (0, 0)),
            Fold::Union {
                elements: Elements::Integers { min, max },
            } => ("union-integers", (min, max)),
        };
        (name, min, max)
    }
}

/// Whether `value` is an integer within `min..=max`.
fn in_range(value: &Value, min: i128, max: i128) -> bool {
    integer(value).is_some_and(|n| (min..=max).contains(&n))
}

/// Why a built-in fold failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// A sum left the range of the property's type.
    #[error("the sum leaves the range {min}..={max} of the property's type")]
    Overflow {
        /// The smallest value the type holds.
        min: i128,
        /// The largest value the type holds.
        max: i128,
    },
}

/// An integer of `i64` or `u64` as an `i128`; `None` for any other value.
pub(crate) fn integer(value: &Value) -> Option<i128> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

/// The JSON value of an integer within `i64` or `u64` (`Null` outside both).
pub(crate) fn integer_value(n: i128) -> Value {
    i64::try_from(n).map_or_else(
        |_| u64::try_from(n).map_or(Value::Null, Value::from),
        Value::from,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const I64: Fold = Fold::Sum {
        min: i64::MIN as i128,
        max: i64::MAX as i128,
    };

    #[test]
    fn sums_are_exact_over_the_whole_range_and_refuse_overflow() {
        let big = json!(i64::MAX - 1);
        assert_eq!(I64.fold(&big, &json!(1)), Ok(Some(json!(i64::MAX))));
        assert!(I64.fold(&big, &json!(2)).is_err());
        let u = Fold::Sum {
            min: 0,
            max: i128::from(u64::MAX),
        };
        assert_eq!(
            u.fold(&json!(u64::MAX - 3), &json!(3)),
            Ok(Some(json!(u64::MAX)))
        );
        assert_eq!(I64.fold(&json!(1.5), &json!(1)), Ok(None));
    }

    #[test]
    fn union_keeps_each_element_once() {
        let folded = Fold::UNION_STRINGS.fold(&json!(["a", "c"]), &json!(["c", "b", "b"]));
        assert_eq!(folded, Ok(Some(json!(["a", "c", "b"]))));
        assert_eq!(
            Fold::UNION_STRINGS.fold(&json!([]), &json!([{"x": 1}])),
            Ok(None)
        );
        let bytes = Fold::Union {
            elements: Elements::Integers { min: 0, max: 255 },
        };
        assert_eq!(
            bytes.fold(&json!([1]), &json!([2])),
            Ok(Some(json!([1, 2])))
        );
        assert_eq!(bytes.fold(&json!([300]), &json!([2])), Ok(None));
    }

    #[test]
    fn a_stored_value_outside_the_type_is_never_folded_into() {
        let u64_max = Fold::Max {
            min: 0,
            max: u64::MAX.into(),
        };
        assert_eq!(u64_max.fold(&json!(-5), &json!(3)), Ok(None));
        assert_eq!(u64_max.fold(&json!(5), &json!(3)), Ok(Some(json!(5))));
        assert_eq!(
            Fold::UNION_STRINGS.fold(&json!([1, 2]), &json!(["a"])),
            Ok(None),
            "a set of integers is not a set of strings"
        );
        assert_eq!(Fold::SUM_I64.fold(&json!(1e30), &json!(1)), Ok(None));
    }
}

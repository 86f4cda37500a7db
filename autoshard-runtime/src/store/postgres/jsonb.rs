//! Documents and values sent as `jsonb` parameters: JSON text, in which a float that holds
//! an integer is written with a decimal point and without an exponent (`1e17` as
//! `100000000000000000.0`). `jsonb` keeps a number as `numeric`, whose text shows a
//! point only where the number was written with one, and `serde_json` writes a float of
//! 10^16 or more with an exponent: it would read back as an integer, a different JSON
//! value (one a fold takes for an integer), where the other stores keep the float.

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};
use std::fmt::Debug;
use std::io;
use tokio_postgres::types::{IsNull, ToSql, Type, accepts, to_sql_checked};

/// A value sent as a `json` or `jsonb` parameter (module docs).
#[derive(Debug)]
pub(super) struct Jsonb<T>(pub T);

impl<T: Serialize + Debug> ToSql for Jsonb<T> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if *ty == Type::JSONB {
            // The binary format's version.
            out.put_u8(1);
        }
        let mut serializer = serde_json::Serializer::with_formatter(out.writer(), Floats);
        self.0.serialize(&mut serializer)?;
        Ok(IsNull::No)
    }

    accepts!(JSON, JSONB);
    to_sql_checked!();
}

/// `serde_json`'s compact text, but for floats that hold an integer (module docs).
struct Floats;

impl Formatter for Floats {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        if value.fract() == 0.0 {
            // Every digit of the float's exact value: read back, it is the same float.
            write!(writer, "{value:.1}")
        } else {
            CompactFormatter.write_f64(writer, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Floats;
    use serde_json::{Value, json};

    fn text(value: &Value) -> String {
        let mut out = Vec::new();
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, Floats);
        serde::Serialize::serialize(value, &mut serializer).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_that_hold_integers_keep_a_point_and_lose_no_digit() {
        for (value, written) in [
            (1e17, "100000000000000000.0"),
            (-4.796_566_914_205_686e18, "-4796566914205685760.0"),
            (1e16, "10000000000000000.0"),
            (5.0, "5.0"),
            (-0.0, "-0.0"),
            (0.5, "0.5"),
            (1e-7, "1e-7"),
            (1.5e-300, "1.5e-300"),
        ] {
            assert_eq!(text(&json!(value)), written);
        }
        for value in [
            1e17,
            -4.796_566_914_205_686e18,
            1e300,
            f64::MAX,
            0.1,
            5e-324,
        ] {
            let written = text(&json!(value));
            let back: Value = serde_json::from_str(&written).unwrap();
            assert_eq!(
                back,
                json!(value),
                "{written} reads back as the float written"
            );
        }
        assert_eq!(
            text(&json!({"n": 3, "x": [2e20]})),
            r#"{"n":3,"x":[200000000000000000000.0]}"#
        );
    }
}

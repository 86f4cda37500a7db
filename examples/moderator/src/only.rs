//! `--only`: which of a command's targets (`hotspot`) or variants (`bench`) run, picked by
//! name.

use autoshard::{Error, Result};

/// The items of `available` (each with its name, in the order they run) that `only` picks:
/// those whose name contains one of `only`, or is the one after `=` (`"=apply sum"`); all
/// of them when `only` is empty. [`Error::Invalid`] when it picks none, naming what there
/// is (`what`: "the targets on this store", "the variants").
pub(crate) fn pick<N: AsRef<str>, T>(
    available: Vec<(N, T)>,
    only: &[String],
    what: &str,
) -> Result<Vec<(N, T)>> {
    if only.is_empty() {
        return Ok(available);
    }
    let names: Vec<String> = available
        .iter()
        .map(|(name, _)| name.as_ref().to_owned())
        .collect();
    let picked: Vec<(N, T)> = available
        .into_iter()
        .filter(|(name, _)| only.iter().any(|o| picks(o, name.as_ref())))
        .collect();
    if picked.is_empty() {
        return Err(Error::Invalid(format!(
            "--only {}: no name contains it; {what} are: {}",
            only.join(","),
            names.join(", ")
        )));
    }
    Ok(picked)
}

/// Whether `only` picks `name`: the name after `=`, else any name containing it.
fn picks(only: &str, name: &str) -> bool {
    match only.strip_prefix('=') {
        Some(exact) => name == exact,
        None => name.contains(only),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(only: &[&str]) -> Result<Vec<&'static str>> {
        let available = vec![
            ("apply sum", 1),
            ("apply sum mapper/client", 2),
            ("naive", 3),
        ];
        let only: Vec<String> = only.iter().map(|o| (*o).to_owned()).collect();
        Ok(pick(available, &only, "the targets")?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    #[test]
    fn nothing_asked_picks_everything_in_order() {
        assert_eq!(
            names(&[]).unwrap(),
            ["apply sum", "apply sum mapper/client", "naive"]
        );
    }

    #[test]
    fn a_name_picks_every_name_containing_it_and_an_equals_sign_one_name() {
        assert_eq!(
            names(&["apply"]).unwrap(),
            ["apply sum", "apply sum mapper/client"]
        );
        assert_eq!(
            names(&["=apply sum", "naive"]).unwrap(),
            ["apply sum", "naive"]
        );
    }

    #[test]
    fn a_pick_of_nothing_names_what_there_is() {
        let message = names(&["nosuch"]).unwrap_err().to_string();
        assert!(message.contains("--only nosuch"), "{message}");
        assert!(
            message.contains("apply sum mapper/client, naive"),
            "{message}"
        );
    }
}

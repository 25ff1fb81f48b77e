//! "Did you mean": the names nearest to one that was not found, for an error that says what to
//! type instead.

/// Up to three of `names` nearest to `wanted` (a typo's distance: at most a third of its length
/// in edits, or one containing the other), nearest first.
pub(crate) fn nearest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let bound = (wanted.chars().count() / 3).max(2);
    let mut near: Vec<(usize, &str)> = names
        .filter_map(|name| {
            let distance = edit_distance(wanted, name);
            (distance <= bound || name.contains(wanted) || wanted.contains(name))
                .then_some((distance, name))
        })
        .collect();
    near.sort();
    near.into_iter()
        .take(3)
        .map(|(_, name)| name.to_owned())
        .collect()
}

/// Levenshtein's distance: the edits (insert, delete, replace a character) from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{edit_distance, nearest};

    #[test]
    fn a_typo_finds_the_queues_nearest_to_it() {
        assert_eq!(edit_distance("payments", "payments"), 0);
        assert_eq!(edit_distance("pyaments", "payments"), 2);
        assert_eq!(edit_distance("orders", "orders-dlq"), 4);
        let queues = ["payments", "payments-dlq", "orders.fifo", "ledger"];
        assert_eq!(nearest("paymnets", queues.into_iter()), ["payments"]);
        // A name the wanted one is part of comes too, farther ones after nearer ones.
        assert_eq!(
            nearest("payment", queues.into_iter()),
            ["payments", "payments-dlq"]
        );
        assert_eq!(nearest("orders", queues.into_iter()), ["orders.fifo"]);
        assert!(nearest("zzz-unrelated", queues.into_iter()).is_empty());
    }
}

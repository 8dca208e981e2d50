//! `loadtest check` on histories written by hand: a linearizable one passes, one with
//! a buyer told "sold out" before the only unit was sold fails, naming the product.

use std::process::Command;

fn check(history: &str) -> (bool, String) {
    let (code, text) = check_files(&[history]);
    (code == 0, text)
}

/// `loadtest check` on one file per history (`None`: a file that is not there): its
/// exit code and what it printed.
fn check_files(histories: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_loadtest"));
    command.arg("check");
    for (i, history) in histories.iter().enumerate() {
        let path = dir.path().join(format!("h{i}.jsonl"));
        if !history.is_empty() {
            std::fs::write(&path, history).unwrap();
        }
        command.arg(&path);
    }
    let out = command.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().expect("an exit code"), text)
}

const INIT: &str = r#"{"type":"init","product_id":7,"stock":1}"#;

fn deduct(id: &str, sent: u64, answered: u64, answer: &str) -> String {
    format!(
        r#"{{"type":"deduct","client":0,"request_id":"{id}","items":[{{"product_id":7,"quantity":1}}],"sent_us":{sent},"answered_us":{answered},"answer":"{answer}"}}"#
    )
}

#[test]
fn a_linearizable_history_passes_and_a_false_sold_out_fails() {
    let concurrent = [deduct("a", 0, 10, "sold"), deduct("b", 5, 8, "refused")];
    let refused_first = [deduct("a", 0, 4, "refused"), deduct("b", 5, 8, "sold")];
    let cases = [
        (concurrent, true, "2 operations: linearizable"),
        (
            refused_first,
            false,
            "NOT linearizable: no order explains the answers on products [[7]]",
        ),
    ];
    for (operations, passes, says) in cases {
        let history = [INIT.to_string()]
            .into_iter()
            .chain(operations)
            .collect::<Vec<_>>();
        let (passed, said) = check(&history.join("\n"));
        assert_eq!(passed, passes, "{said}");
        assert!(said.contains(says), "{said}");
    }
}

/// A read of product 7 answered with `stock` units.
fn read(sent: u64, answered: u64, stock: i64) -> String {
    format!(
        r#"{{"type":"read","client":1,"product_id":7,"sent_us":{sent},"answered_us":{answered},"stock":{stock}}}"#
    )
}

/// Several files: each judged, one missing named and the rest still checked; the exit
/// code says the worst (1: not linearizable; 2: undecided or unreadable; 3: only
/// unobserved).
#[test]
fn every_file_is_judged_and_the_exit_code_says_the_worst() {
    let good = [
        INIT.to_string(),
        deduct("a", 0, 10, "sold"),
        read(20, 25, 0),
    ]
    .join("\n");
    let unobserved = [INIT.to_string(), deduct("a", 0, 10, "sold")].join("\n");
    let (code, said) = check_files(&[&good, &unobserved]);
    assert_eq!(code, 3, "{said}");
    assert!(
        said.contains("h0.jsonl: 2 operations: linearizable"),
        "{said}"
    );
    assert!(
        said.contains("h1.jsonl: 1 operations: unobserved"),
        "{said}"
    );
    let bad = [
        INIT.to_string(),
        deduct("a", 0, 4, "refused"),
        deduct("b", 5, 8, "sold"),
    ]
    .join("\n");
    let (code, said) = check_files(&["", &good]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("h0.jsonl: not checked: reading it"), "{said}");
    assert!(
        said.contains("h1.jsonl: 2 operations: linearizable"),
        "{said}"
    );
    let (code, said) = check_files(&["", &bad, &good]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("1 of 3 histories not linearizable, 1 undecided or unreadable"),
        "{said}"
    );
}

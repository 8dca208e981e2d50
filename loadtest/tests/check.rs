//! `loadtest check` on histories written by hand: a linearizable one passes, one with
//! a buyer told "sold out" before the only unit was sold fails, naming the product.

use std::process::Command;

fn check(history: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    std::fs::write(&path, history).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
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

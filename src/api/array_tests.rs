use super::*;

/// Every element, and how many steps it took when every slice is over.
fn read(body: &[u8], field: &str) -> Result<(Vec<String>, usize), String> {
    let mut scan = ArrayScan::new(body, field)?;
    let (mut out, mut steps) = (Vec::new(), 0);
    loop {
        steps += 1;
        let done = scan.step(
            || true,
            |v| {
                out.push(v.get().to_string());
                Ok(())
            },
        )?;
        if done {
            return Ok((out, steps));
        }
    }
}

#[test]
fn an_answer_is_read_an_element_a_step() {
    let elements: Vec<String> = (0..50)
        .map(|i| {
            format!(
                r#"{{"key":"k{i:02}","payload":[{}]}}"#,
                vec!["1"; i].join(",")
            )
        })
        .collect();
    let body = format!(r#"{{"dead":[{}]}}"#, elements.join(","));
    let (read_back, steps) = read(body.as_bytes(), "dead").expect("an answer");
    assert_eq!(read_back, elements);
    assert_eq!(steps, 50);
    assert_eq!(read(br#"{"results":[]}"#, "results"), Ok((Vec::new(), 1)));
    assert_eq!(
        read(b" {\"results\":[ ] } ", "results"),
        Ok((Vec::new(), 1))
    );
    let spaced = read(b" {\"dead\":[ 1 , \"a\" ,{} ] } ", "dead").expect("whitespace");
    assert_eq!(spaced.0, ["1", "\"a\"", "{}"]);
}

#[test]
fn anything_else_is_refused() {
    for body in [
        &b"not json"[..],
        b"",
        br#"{"other":[]}"#,
        br#"{"dead":[1"#,
        br#"{"dead":[1,]}"#,
        br#"{"dead":[1]}x"#,
        br#"{"dead":[1],"more":1}"#,
        br#"{"dead":[1 2]}"#,
        br#"{"dead":[]"#,
        br#"{"dead":[]}]"#,
        br#"{"dead":{}}"#,
    ] {
        assert!(
            read(body, "dead").is_err(),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    // What `each` refuses ends the read with its reason.
    let mut scan = ArrayScan::new(br#"{"dead":[1,2]}"#, "dead").expect("opens");
    assert_eq!(
        scan.step(|| false, |v| Err(format!("no {}", v.get()))),
        Err("no 1".to_string())
    );
}

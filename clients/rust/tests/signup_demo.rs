//! The sign-up demo (examples/signup_demo.rs, included here as a module) against a real
//! server prints the experiment's table: 15/5/30, 15/5/26, 18/2/29.

mod support;

#[allow(dead_code)]
#[path = "../examples/signup_demo.rs"]
mod demo;

#[tokio::test]
async fn the_signup_demo_prints_the_experiments_table() {
    let server = support::server(&[]).await;
    let (rows, problems) = demo::run(&server.target(), Default::default())
        .await
        .expect("the demo ran");
    let table = demo::table(&rows);
    println!("{table}");
    assert!(problems.is_empty(), "{problems:?}");
    let got: Vec<(usize, usize, usize)> = rows.iter().map(|r| (r.1, r.2, r.3)).collect();
    assert_eq!(
        got,
        vec![(15, 5, 30), (15, 5, 26), (18, 2, 29)],
        "\n{table}"
    );
    assert!(demo::mismatches(&rows).is_empty());
}

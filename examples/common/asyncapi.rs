//! `--asyncapi`: every example prints its service's AsyncAPI 3.0 document (JSON) on stdout and
//! exits, instead of running.

use rust_stream::App;

/// Whether the command line asks for the document.
pub fn requested() -> bool {
    std::env::args().skip(1).any(|arg| arg == "--asyncapi")
}

/// Prints the document of `app`.
pub fn print(app: &impl App) {
    let document = serde_json::to_string_pretty(&app.asyncapi()).expect("a JSON value prints");
    println!("{document}");
}

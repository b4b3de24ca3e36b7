//! The `prox` command-line tool.

fn main() {
    println!("prox {}", env!("CARGO_PKG_VERSION"));
}

//! The `tidegate` binary: the command line of [`tidegate::cli::main`].

fn main() {
    tidegate::cli::main()
}

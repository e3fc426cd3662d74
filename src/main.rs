fn main() -> std::process::ExitCode {
    mur::cli::main()
}

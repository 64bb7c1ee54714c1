fn main() {
    // Fail closed until the real hook lands.
    eprintln!("StepProof hook is not built yet: denying");
    std::process::exit(2);
}

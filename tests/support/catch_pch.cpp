// The owner of the precompiled Catch2 header every test reuses (tests/CMakeLists.txt, kt_add_test). An executable,
// so that it is compiled with the same position-independence flags as the tests; it is never run.
int main() { return 0; }

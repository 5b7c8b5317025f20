// main() of the test binaries that need nothing before their tests run.
#include "common/test_main.h"

int main(int argc, char** argv) { return tpar_test::runTests(argc, argv); }

#include <cstdio>
int main() { std::puts("netprof-loader: under construction"); return 1; }

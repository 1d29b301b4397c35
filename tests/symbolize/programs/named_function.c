/* One function, named by -DFUNCTION=...: built twice with one build-id, the
 * second stands for a target's file claiming a system library's. */
__attribute__((noinline)) int FUNCTION(int x) { return x * 3 + 1; }

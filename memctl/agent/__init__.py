"""What an agent reads and writes directly: L1's pointer map (`insight`), the recalled-memory
block injected before a turn (`compose`), the last sessions (`recent`) and working task state
(`tasks`). Imports `core`, `l4`, `longterm` and `recall`."""

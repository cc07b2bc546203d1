"""RocksDB tuning: a typed, validated options dataclass and the native options it builds.

Memory model (what bounds a Python worker's RocksDB memory):

* one LRU block cache of :attr:`RocksDBOptions.memory_budget` bytes per Python
  worker process, shared by every store that worker holds with the same options;
* index and filter blocks live in that cache (two-level index, partitioned
  filters, top level pinned), so they do not grow outside it with the state;
* memtables are charged to the same cache through a ``WriteBufferManager``
  capped at ``write_buffer_size * max_write_buffers``, which is at most half
  the budget, so a write-heavy batch flushes instead of growing memory. By
  default the memtables take that half (Flink's default write-buffer ratio of
  its managed memory is 0.5 too): fewer, larger flushes leave fewer sorted
  runs for a get to search; with 1M keys firesteel's value gets went from
  about 120k to 150k ops/s at the 64 MiB budget (``backends/rocksdb/README.md``).

What is *not* in the budget is a per-process constant (RocksDB's table
readers and threads, allocator slack, the Python side); the README states the
measured figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from firesteel.core.spi import ConfigError, check_ranges, option
from firesteel.core.toolkit import WorkerCache

KiB = 1024
MiB = 1024 * KiB
DEFAULT_MEMTABLE_CAP = 64 * MiB
"""The largest default memtable: RocksDB's own default size."""

Compression = Literal["none", "snappy", "lz4", "zstd"]
COMPRESSIONS: tuple[str, ...] = ("none", "snappy", "lz4", "zstd")
Compaction = Literal["universal", "level"]
COMPACTIONS: tuple[str, ...] = ("universal", "level")


@dataclass(frozen=True)
class RocksDBOptions:
    """How each local RocksDB instance is tuned. Every field is validated on construction.

    ``memory_budget``: bytes of the block cache per Python worker (default
    64 MiB); memtables, index and filter blocks are charged to it.
    ``write_buffer_size``: bytes of one memtable (default: half the budget split over
    ``max_write_buffers``, at most RocksDB's own 64 MiB; 16 MiB at the default budget).
    ``max_write_buffers``: memtables per instance, active plus flushing (default 2);
    ``write_buffer_size * max_write_buffers`` may be at most half the budget.
    ``compression``: of SST files, ``"none"``, ``"snappy"``, ``"lz4"`` (default) or ``"zstd"``.
    ``block_size``: bytes of uncompressed data per SST block (default 16 KiB).
    ``bloom_bits_per_key``: bloom filter size, 0 for none (default 10: ~1% false positives).
    ``target_file_size``: bytes of SST files written by compaction (default 16 MiB);
    with leveled compaction, smaller files make incremental checkpoints upload less after
    a compaction.
    ``background_jobs``: RocksDB's flush and compaction threads (default 2).
    ``compaction``: ``"universal"`` (default) or ``"level"``. Universal compaction
    merges the small sorted runs of recent batches with each other and rewrites
    the large old one rarely, so an incremental checkpoint uploads little more
    than what the batch changed (Kafka Streams' RocksDB stores use it by default,
    for its low write amplification). Leveled compaction rewrites the
    whole first level whenever new files reach it, which re-uploads most of the
    state every few batches under random-key churn; it keeps less disk (no
    temporary doubling during a full merge) and fewer files to search per read.
    Either can open the other's checkpoints.
    ``compaction_trigger``: sorted runs (universal) or level-0 files (level) that
    start a compaction (default 8).
    """

    memory_budget: int = option(
        64 * MiB, doc="block cache bytes per worker", name="memory_budget", min=8 * MiB, max=1 << 40
    )
    write_buffer_size: int | None = option(
        None, doc="bytes of one memtable", name="write_buffer_size", min=MiB, max=1 << 32
    )
    max_write_buffers: int = option(
        2, doc="memtables per instance", name="max_write_buffers", min=2, max=64
    )
    compression: Compression = "lz4"
    block_size: int = option(
        16 * KiB, doc="bytes per SST block", name="block_size", min=KiB, max=4 * MiB
    )
    bloom_bits_per_key: int = option(
        10, doc="bloom filter bits per key", name="bloom_bits_per_key", min=0, max=64
    )
    target_file_size: int = option(
        16 * MiB, doc="bytes of compacted SST files", name="target_file_size", min=MiB, max=1 << 34
    )
    background_jobs: int = option(
        2, doc="flush and compaction threads", name="background_jobs", min=1, max=64
    )
    compaction: Compaction = "universal"
    compaction_trigger: int = option(
        8, doc="runs or files that start a compaction", name="compaction_trigger", min=2, max=64
    )

    def __post_init__(self) -> None:
        check_ranges(self, "RocksDBOptions")
        if self.write_buffer_size is None:
            # Frozen: the derived default is stored once, so equal options compare equal.
            derived = min(DEFAULT_MEMTABLE_CAP, self.memory_budget // (2 * self.max_write_buffers))
            object.__setattr__(self, "write_buffer_size", max(MiB, derived))
        _one_of("compression", self.compression, COMPRESSIONS)
        _one_of("compaction", self.compaction, COMPACTIONS)
        if self.write_buffer_bytes * 2 > self.memory_budget:
            msg = (
                f"RocksDBOptions: write_buffer_size * max_write_buffers = "
                f"{self.write_buffer_bytes} bytes exceeds half of memory_budget="
                f"{self.memory_budget}; lower them or raise memory_budget"
            )
            raise ConfigError(msg)

    @property
    def memtable_size(self) -> int:
        """Bytes of one memtable: ``write_buffer_size``, or its default for this budget."""
        # __post_init__ replaced None by the derived default and checked it.
        return cast(int, self.write_buffer_size)

    @property
    def write_buffer_bytes(self) -> int:
        """The memtable memory one instance may hold (charged to the budget)."""
        return self.memtable_size * self.max_write_buffers

    def native(self) -> Any:
        """A new ``rocksdict.Options`` in raw (bytes) mode for one instance of these options.

        The cache and write buffer manager are shared by every instance of the
        same options in this process (see :func:`shared_memory`).
        """
        import rocksdict as rd

        cache, manager = shared_memory(self)
        table = rd.BlockBasedOptions()
        table.set_block_cache(cache)
        table.set_block_size(self.block_size)
        table.set_cache_index_and_filter_blocks(True)
        # Partitioned index and filters: a lookup loads one small partition into the
        # cache, not a whole file's index and filter (which thrashed a 64 MiB cache).
        table.set_index_type(rd.BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_pin_top_level_index_and_filter(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_metadata_block_size(4 * KiB)
        if self.bloom_bits_per_key:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        options = rd.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(self.memtable_size)
        options.set_max_write_buffer_number(self.max_write_buffers)
        options.set_write_buffer_manager(manager)
        options.set_target_file_size_base(self.target_file_size)
        options.set_max_bytes_for_level_base(self.target_file_size * 4)
        options.set_max_background_jobs(self.background_jobs)
        options.set_compression_type(getattr(rd.DBCompressionType, self.compression)())
        options.set_keep_log_file_num(2)
        options.set_level_zero_file_num_compaction_trigger(self.compaction_trigger)
        if self.compaction == "universal":
            options.set_compaction_style(rd.DBCompactionStyle.universal())
        return options


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        msg = (
            f"RocksDBOptions: option '{name}' is {value!r}; it must be one of {', '.join(allowed)}"
        )
        raise ConfigError(msg)


_SHARED: WorkerCache[RocksDBOptions, tuple[Any, Any]] = WorkerCache()


def shared_memory(options: RocksDBOptions) -> tuple[Any, Any]:
    """The block cache and write buffer manager of ``options`` in this process (created once)."""
    import rocksdict as rd

    def create() -> tuple[Any, Any]:
        cache = rd.Cache(options.memory_budget)
        manager = rd.WriteBufferManager.new_write_buffer_manager_with_cache(
            options.write_buffer_bytes, False, cache
        )
        return cache, manager

    return _SHARED.get(options, create)

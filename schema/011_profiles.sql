-- 011: measured time beside the artifacts (issue 29). `kdb profile import FILE… --tag T` reads profiles of a run
-- (torch.profiler Chrome traces, Triton Proton hatchet files), stores each file's bytes in the blob store, and
-- links every launch to the kernel folder of the snapshot that ran it (kdb/profile/link.py); launches it cannot
-- link are counted by reason. Rows belong to the snapshot: `kdb rm` drops them, `kdb push`/`pull` carry them.
-- Re-importing a file under the same tag replaces its rows (same rows: the import is idempotent).

CREATE TABLE profile_files (
    snapshot_id  INTEGER NOT NULL,
    profile_hash VARCHAR NOT NULL,   -- sha256 of the file's bytes as given (gzipped or not): its blob
    name         VARCHAR NOT NULL,   -- the file's name when imported (no directory)
    format       VARCHAR NOT NULL,   -- 'torch-trace' | 'proton-hatchet'
    gzipped      BOOLEAN NOT NULL,
    size         BIGINT NOT NULL,    -- bytes of the file
    launches     BIGINT NOT NULL,    -- every GPU kernel launch in it, Triton or not
    total_ns     BIGINT NOT NULL,    -- their summed duration
    imported_at  TIMESTAMP NOT NULL, -- UTC
    PRIMARY KEY (snapshot_id, profile_hash)
);

-- Launches linked to a kernel folder of the snapshot, summed per profile file and folder.
CREATE TABLE profile_kernel_times (
    snapshot_id  INTEGER NOT NULL,
    profile_hash VARCHAR NOT NULL,
    cache_key    VARCHAR NOT NULL,   -- the kernel folder (kernels.cache_key)
    kernel_name  VARCHAR NOT NULL,
    launches     BIGINT NOT NULL,
    total_ns     BIGINT NOT NULL,
    link         VARCHAR NOT NULL,   -- how: 'name', 'launch record', 'autotune winner', 'grid', 'same binary' (comma-separated)
    detail       VARCHAR,            -- 'same binary': the folders holding the identical code object
    PRIMARY KEY (snapshot_id, profile_hash, cache_key)
);

-- Launches that were not linked, summed per profile file, kernel name and reason.
CREATE TABLE profile_unlinked (
    snapshot_id  INTEGER NOT NULL,
    profile_hash VARCHAR NOT NULL,
    kernel_name  VARCHAR NOT NULL,
    reason       VARCHAR NOT NULL,   -- 'not a Triton kernel', 'no kernel of that name', 'no folder of that name fits the launch', 'ambiguous: N folders fit'
    launches     BIGINT NOT NULL,
    total_ns     BIGINT NOT NULL,
    detail       VARCHAR,            -- the launch record that fitted no folder / the folders that fit
    PRIMARY KEY (snapshot_id, profile_hash, kernel_name, reason)
);

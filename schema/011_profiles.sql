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

-- Per kernel folder of a snapshot: its launches and time over every profile imported under the tag. share is the
-- folder's time over the snapshot's whole GPU kernel time: every kernel launch of the same profiles, linked or
-- not, Triton or not (cuBLAS, cuDNN, aten…).
CREATE VIEW kernel_times AS
SELECT s.tag, t.cache_key, t.kernel_name, sum(t.launches)::BIGINT AS launches, sum(t.total_ns)::BIGINT AS total_ns,
       sum(t.total_ns) / sum(t.launches) AS mean_ns, sum(t.total_ns) / any_value(g.total_ns) AS share, s.snapshot_id
FROM profile_kernel_times t
JOIN snapshots s USING (snapshot_id)
JOIN (SELECT snapshot_id, sum(total_ns) AS total_ns FROM profile_files GROUP BY snapshot_id) g USING (snapshot_id)
GROUP BY s.tag, t.cache_key, t.kernel_name, s.snapshot_id;

-- Per snapshot and reason: the launches no folder was linked to.
CREATE VIEW profile_unlinked_counts AS
SELECT s.tag, u.reason, count(DISTINCT u.kernel_name) AS kernels, sum(u.launches)::BIGINT AS launches,
       sum(u.total_ns)::BIGINT AS total_ns, s.snapshot_id
FROM profile_unlinked u JOIN snapshots s USING (snapshot_id)
GROUP BY s.tag, u.reason, s.snapshot_id;

-- Snapshots, their files and blobs, the kernel folders with Triton's JSON, and problems.
-- Applied once by kdb's migration runner; recorded in schema_migrations. Never edited after release:
-- later changes go in new numbered files.

CREATE TABLE snapshots (
    snapshot_id     INTEGER PRIMARY KEY,
    tag             VARCHAR NOT NULL UNIQUE,
    created_at      TIMESTAMP NOT NULL,      -- UTC
    source_path     VARCHAR NOT NULL,
    host            VARCHAR,
    kdb_version     VARCHAR,
    triton_versions VARCHAR[],      -- distinct versions (or release families, e.g. '3.0-3.1') found
    targets         VARCHAR[],      -- distinct 'backend:arch:warp_size' found
    kernel_count    INTEGER NOT NULL,
    file_count      INTEGER NOT NULL,
    problem_count   INTEGER NOT NULL,
    raw_bytes       BIGINT NOT NULL, -- sum of the sizes of the snapshot's files
    stored_bytes    BIGINT NOT NULL, -- compressed size of the distinct blobs the snapshot references
    new_bytes       BIGINT NOT NULL, -- compressed bytes this ingest added to the store (the rest was deduplicated)
    labels          MAP(VARCHAR, VARCHAR)
);

CREATE TABLE blobs (
    hash        VARCHAR PRIMARY KEY,   -- sha256 of the raw bytes, lowercase hex
    size        BIGINT NOT NULL,       -- raw bytes
    stored_size BIGINT NOT NULL        -- bytes on disk, zstd-compressed
);

-- Cache folders are content-addressed, like git trees: a folder's digest is the SHA-256 of its name
-- and its (relative file name, blob hash) pairs. A snapshot lists the folders it holds; a folder seen
-- before (an unchanged kernel in a re-ingest) adds one row, and its analysis is never redone.
CREATE TABLE folders (
    folder_digest VARCHAR PRIMARY KEY,
    cache_key     VARCHAR NOT NULL,      -- the folder name in the cache
    file_count    INTEGER NOT NULL,
    bytes         BIGINT NOT NULL
);

CREATE TABLE folder_files (
    folder_digest VARCHAR NOT NULL,
    name          VARCHAR NOT NULL,      -- path relative to the folder (POSIX)
    hash          VARCHAR NOT NULL,
    size          BIGINT NOT NULL,
    kind          VARCHAR NOT NULL,      -- hsaco, cubin, amdgcn, ptx, llir, ttir, ttgir, source, json, group, autotune, module, partial, temporary, other
    PRIMARY KEY (folder_digest, name)
);

CREATE TABLE snapshot_folders (
    snapshot_id   INTEGER NOT NULL,
    cache_key     VARCHAR NOT NULL,
    folder_digest VARCHAR NOT NULL,
    PRIMARY KEY (snapshot_id, cache_key)
);

CREATE TABLE top_files (                 -- files at the top of the cache, outside any folder
    snapshot_id INTEGER NOT NULL,
    path        VARCHAR NOT NULL,
    hash        VARCHAR NOT NULL,
    size        BIGINT NOT NULL,
    kind        VARCHAR NOT NULL,
    PRIMARY KEY (snapshot_id, path)
);

CREATE TABLE kernel_folders (
    folder_digest         VARCHAR PRIMARY KEY,
    cache_key             VARCHAR NOT NULL,   -- the cache folder name
    name                  VARCHAR NOT NULL,
    backend               VARCHAR,            -- hip or cuda
    arch                  VARCHAR,            -- gfx942, sm90, ...
    warp_size             INTEGER,
    num_warps             INTEGER,
    num_stages            INTEGER,
    num_ctas              INTEGER,
    waves_per_eu          INTEGER,
    matrix_instr_nonkdim  INTEGER,
    kpack                 INTEGER,
    shared                BIGINT,             -- Triton's shared memory / LDS in bytes (dynamic on AMD)
    triton_version        VARCHAR,
    triton_version_source VARCHAR,            -- 'json', or 'folder-name' when inferred from the cache-key encoding
    hash                  VARCHAR,
    metadata              JSON,               -- the whole Triton JSON, as written
    metadata_digest       VARCHAR             -- SHA-256 of that JSON without hash/triton_version/extern_libs/name
);

CREATE TABLE file_problems (               -- problems met while walking and reading a cache
    snapshot_id INTEGER NOT NULL,
    path        VARCHAR NOT NULL,
    cache_key   VARCHAR,
    stage       VARCHAR NOT NULL,   -- walk, read
    reason      VARCHAR NOT NULL
);

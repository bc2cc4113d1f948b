-- 007: what an ingest saw of each file of the directory it read (size, modification time, inode) with the
-- file's blob hash. The next ingest of the same directory on the same host takes the hash of a file whose
-- size, mtime and inode are unchanged from here instead of reading the file again, as git's index and
-- restic do (`kdb ingest --rehash` reads every file). Not part of any snapshot: `kdb push`/`pull` leave it.
-- A row is used only while its blob is still in `blobs`.

CREATE TABLE file_stats (
    host        VARCHAR NOT NULL,
    source_path VARCHAR NOT NULL,   -- the ingested directory, resolved
    path        VARCHAR NOT NULL,   -- the file, relative to it (POSIX)
    size        BIGINT NOT NULL,
    mtime_ns    BIGINT NOT NULL,
    ino         BIGINT NOT NULL,
    hash        VARCHAR NOT NULL,
    PRIMARY KEY (host, source_path, path)
);

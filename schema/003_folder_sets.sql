-- 003: a snapshot's kernel folders are stored once per distinct set, like a git tree.
--
-- Before, every snapshot had its own snapshot_folders rows, so re-ingesting an unchanged cache under
-- a new tag added one row per kernel folder (about 1% of the store for a 1,200-kernel cache). Now a
-- snapshot names a folder set by digest; an unchanged cache adds one snapshots row and nothing else.
-- snapshot_folders keeps its columns (snapshot_id, cache_key, folder_digest) as a view, so queries
-- written against it keep working.

CREATE TABLE folder_sets (
    set_digest    VARCHAR NOT NULL,   -- sha256 of the "cache_key folder_digest" lines, sorted, joined by \n
    cache_key     VARCHAR NOT NULL,
    folder_digest VARCHAR NOT NULL,
    PRIMARY KEY (set_digest, cache_key)
);

ALTER TABLE snapshots ADD COLUMN folder_set VARCHAR;   -- NULL: a snapshot with no kernel folder

UPDATE snapshots SET folder_set = d.set_digest
FROM (SELECT snapshot_id,
             sha256(string_agg(cache_key || ' ' || folder_digest, chr(10) ORDER BY cache_key)) AS set_digest
      FROM snapshot_folders GROUP BY snapshot_id) d
WHERE snapshots.snapshot_id = d.snapshot_id;

INSERT INTO folder_sets
SELECT DISTINCT s.folder_set, sf.cache_key, sf.folder_digest
FROM snapshot_folders sf JOIN snapshots s USING (snapshot_id);

DROP TABLE snapshot_folders;   -- the view of the same name: views.sql

-- 004: a digest and group totals of each kernel's instruction mix, beside its other facts.
--
-- `kdb diff` compares two kernels' mixes by digest and reads mnemonic rows only for pairs whose
-- digests differ: aggregating instr_mix for every kernel of two 10k-kernel snapshots took longer
-- than the rest of the diff. Rows written before this migration are filled here, in SQL, with the
-- same definitions kdb/analysis.py uses at ingest.

ALTER TABLE kernel_analysis ADD COLUMN instr_mix_digest VARCHAR;  -- sha256 of the "mnemonic grp count" lines (sorted, \n-joined) of instr_source's mix
ALTER TABLE kernel_analysis ADD COLUMN instr_groups JSON;         -- {group: instructions} of the same mix

UPDATE kernel_analysis SET instr_mix_digest = d.digest, instr_groups = g.groups
FROM (SELECT m.folder_digest,
             sha256(string_agg(m.mnemonic || ' ' || m.grp || ' ' || m.count, chr(10) ORDER BY m.mnemonic, m.grp)) AS digest
      FROM instr_mix_counts m JOIN kernel_analysis a ON a.folder_digest = m.folder_digest AND a.instr_source = m.source
      GROUP BY m.folder_digest) d,
     (SELECT folder_digest, json_group_object(grp, n) AS groups
      FROM (SELECT m.folder_digest, m.grp, sum(m.count) AS n
            FROM instr_mix_counts m JOIN kernel_analysis a ON a.folder_digest = m.folder_digest AND a.instr_source = m.source
            GROUP BY ALL)
      GROUP BY folder_digest) g
WHERE kernel_analysis.folder_digest = d.folder_digest AND d.folder_digest = g.folder_digest;

-- 013: a profile is one run's measurement, however its file was compressed (issue 37).
--
-- profile_hash stays the sha256 of the file's bytes as given (its blob: `kdb cat TAG HASH` gives them back), and
-- content_hash is the sha256 of its JSON (the file decompressed): a trace imported plain and then gzipped is the
-- same profile, whose rows the second import replaces instead of counting the run twice. A plain file's content
-- is its bytes; a gzipped file imported before this migration gets its content hash when its snapshot next
-- imports a profile (kdb/profile/importer.py reads the stored file).
-- device: the GPU the file says ran its launches ('NVIDIA H100 80GB HBM3 (cuda sm90)'; several: '; '-separated);
-- NULL where the file names none (or it was imported before this migration). `kdb profile import` refuses a
-- profile whose device runs none of the snapshot's targets.

ALTER TABLE profile_files ADD COLUMN content_hash VARCHAR;
ALTER TABLE profile_files ADD COLUMN device VARCHAR;
UPDATE profile_files SET content_hash = profile_hash WHERE NOT gzipped;

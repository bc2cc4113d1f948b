-- 006: why a kernel's instruction mix is not from its best source.
--
-- An NVIDIA kernel's mix is its SASS (nvdisasm) when that can be computed, else its PTX; the
-- fallback used to be silent. instr_note says why there is no SASS: `no SASS: skipped (--no-sass)`,
-- `no SASS: no nvdisasm found (pip install 'kdb[nvidia]')`, `no SASS: no nvdisasm here can decode SM103`.
-- NULL when the mix is from the best source there is (and for every row written before this migration).

ALTER TABLE kernel_analysis ADD COLUMN instr_note VARCHAR;

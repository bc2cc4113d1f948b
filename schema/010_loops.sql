-- 010: where the cost is inside a kernel (issue 28): loop depth of every instruction, scratch inside loops,
-- and how far each kernel sits from an occupancy cliff.
--
-- The loop nest comes from the control-flow graph of the kernel's `instr_source` (the asm, the SASS, or the
-- PTX): natural loops as LLVM's LoopInfo counts them (kdb/analysis/loops.py). Rows written before this
-- migration have NULL in the new columns and no loop rows: `kdb reindex` computes them from the stored blobs.

ALTER TABLE kernel_analysis ADD COLUMN max_loop_depth INTEGER;          -- deepest loop nesting of any instruction (0: no loop)
ALTER TABLE kernel_analysis ADD COLUMN scratch_instr_in_loops INTEGER;  -- scratch (AMD) / local-memory (NVIDIA) instructions at loop depth >= 1
ALTER TABLE kernel_analysis ADD COLUMN loop_weighted_scratch BIGINT;    -- the same instructions, each weighted 32^depth (kdb/analysis/loops.py)
ALTER TABLE kernel_analysis ADD COLUMN scratch_by_loop_depth JSON;      -- {"depth": scratch instructions} of the instr_source mix
ALTER TABLE kernel_analysis ADD COLUMN registers_to_cliff INTEGER;      -- registers it can gain before losing a wave (AMD) / block (NVIDIA)
ALTER TABLE kernel_analysis ADD COLUMN registers_to_gain INTEGER;       -- registers it must shed to gain one (NULL: no register count would)

-- Instructions at loop depth >= 1, per source and depth; depth 0 is the rest of instr_mix_counts (the view
-- instr_mix_by_loop derives it), so a kernel without loops costs no row here.
CREATE TABLE instr_mix_loop_counts (
    folder_digest VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,   -- as instr_mix_counts.source
    loop_depth    INTEGER NOT NULL,   -- >= 1
    mnemonic      VARCHAR NOT NULL,
    grp           VARCHAR NOT NULL,
    count         INTEGER NOT NULL,
    PRIMARY KEY (folder_digest, source, loop_depth, mnemonic, grp)
);

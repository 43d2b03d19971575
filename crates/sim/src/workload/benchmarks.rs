//! The benchmark generators that build a [`Job`] each: [`MpiIoTest`],
//! [`IorMpiIo`], [`Btio`], [`MpiTileIo`] and [`Hpio`] (an IOR instance's
//! job is built in the parent module).

use super::*;

/// The mpi-io-test benchmark (PVFS2 distribution, Clemson University and
/// Argonne), as the LiU paper describes it: "each MPI process accesses a
/// contiguous chunk of the file in one iteration. A barrier is used to
/// synchronize each iteration across all processes. The following iteration
/// of all the processes accesses the next contiguous chunk of the file."
/// LiU ran 14 processes with 64 KiB requests and wrote 20 GB in total.
///
/// In iteration `i`, rank `r` writes `chunk_bytes` at
/// `(i · processes + r) · chunk_bytes`, then waits at a barrier, so every
/// iteration covers one contiguous span and the iterations follow each
/// other through the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiIoTest {
    /// File written.
    pub file: FileId,
    /// Number of processes.
    pub processes: u32,
    /// Bytes each process writes per iteration (one request).
    pub chunk_bytes: u64,
    /// Iterations, each ending with a barrier.
    pub iterations: u64,
}

impl MpiIoTest {
    /// The benchmark as a simulator job: per process, `iterations` times
    /// an [`Op::Write`] followed by an [`Op::Barrier`].
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        const WHAT: &str = "mpi-io-test";
        positive(WHAT, "the process count", u64::from(self.processes))?;
        positive(WHAT, "the chunk size", self.chunk_bytes)?;
        positive(WHAT, "the iteration count", self.iterations)?;
        let n = u64::from(self.processes);
        product(WHAT, &[self.iterations, n, self.chunk_bytes])?;
        check_ops(WHAT, self.iterations.saturating_mul(n).saturating_mul(2))?;
        let processes = (0..n)
            .map(|rank| {
                let mut ops = Vec::with_capacity(2 * self.iterations as usize);
                for offset in self.offsets(rank) {
                    ops.push(Op::Write(WriteRequest {
                        file: self.file,
                        offset,
                        len: self.chunk_bytes,
                    }));
                    ops.push(Op::Barrier);
                }
                ops
            })
            .collect();
        Ok(Job::starting_now(name, processes))
    }

    /// The offsets rank `rank` accesses, one per iteration, in order: the
    /// one definition of the pattern, which the simulator's jobs and the
    /// real readers (`sluice-readers`) both use.
    pub fn offsets(&self, rank: u64) -> impl Iterator<Item = u64> + '_ {
        let n = u64::from(self.processes);
        (0..self.iterations).map(move |i| (i * n + rank) * self.chunk_bytes)
    }
}

/// The ior-mpi-io benchmark (ASCI Purple suite, LLNL), as the LiU paper
/// describes it: "each of the n processes accesses a contiguous 1/n portion
/// of the entire file. Each process continuously issues sequential I/O
/// requests with a fixed size." LiU ran 14 processes with 64 KiB requests
/// and wrote 20 GB.
///
/// The writes are those of IOR segmented-contiguous; it is a type of its
/// own because LiU also reads the file back with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IorMpiIo {
    /// File written.
    pub file: FileId,
    /// Number of processes.
    pub processes: u32,
    /// Bytes per request.
    pub request_bytes: u64,
    /// Bytes of the file; a positive multiple of `processes * request_bytes`.
    pub file_bytes: u64,
}

impl IorMpiIo {
    /// The benchmark as a simulator job: rank `r` writes
    /// `[r · file_bytes / processes, (r + 1) · file_bytes / processes)`
    /// in ascending `request_bytes` requests, no barriers.
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        const WHAT: &str = "ior-mpi-io";
        positive(WHAT, "the process count", u64::from(self.processes))?;
        positive(WHAT, "the request size", self.request_bytes)?;
        let n = u64::from(self.processes);
        let unit = product(WHAT, &[n, self.request_bytes])?;
        if self.file_bytes == 0 || !self.file_bytes.is_multiple_of(unit) {
            let below = self.file_bytes / unit * unit;
            let suggestion = match (below, below.checked_add(unit)) {
                (0, Some(above)) => format!("use {above} B"),
                (_, Some(above)) => format!("use {below} B or {above} B"),
                (_, None) => format!("use {below} B"),
            };
            return Err(WorkloadError(format!(
                "{WHAT}: file size {} B is not a positive multiple of processes × request size \
                 ({n} × {} B = {unit} B); {suggestion}",
                self.file_bytes, self.request_bytes
            )));
        }
        check_ops(WHAT, self.file_bytes / unit * n)?;
        let processes = (0..n)
            .map(|rank| {
                self.offsets(rank)
                    .map(|offset| {
                        Op::Write(WriteRequest {
                            file: self.file,
                            offset,
                            len: self.request_bytes,
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(Job::starting_now(name, processes))
    }

    /// The offsets rank `rank` accesses, in order: its contiguous
    /// `1/processes` of the file (whole requests only) in ascending
    /// requests. The one definition of the pattern, shared with the real
    /// readers (`sluice-readers`).
    pub fn offsets(&self, rank: u64) -> impl Iterator<Item = u64> + '_ {
        let per_process = self.file_bytes / u64::from(self.processes) / self.request_bytes;
        (0..per_process).map(move |k| (rank * per_process + k) * self.request_bytes)
    }
}

/// BTIO-like (NAS BT-IO, non-collective "simple" I/O, as the LiU paper ran
/// it): the solution of an `n`³ grid, 5 doubles (40 B) per cell, is
/// written `steps` times, one file region of `n`³ × 40 B per step. The
/// processes form a `q × q` grid over the (y, z) planes (`processes` must
/// be a square: 9, 16, 25), and each writes, per step, one contiguous run
/// of `n` cells (x is fastest) for every (y, z) row it owns: many small
/// non-contiguous writes. Then the whole file is read back in the same
/// pattern (the paper: "all the data are read back for result sanity
/// tests"). Class B is n = 102, class C n = 162.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Btio {
    /// File written then read.
    pub file: FileId,
    /// Number of processes (a square).
    pub processes: u32,
    /// Grid points per dimension.
    pub n: u64,
    /// Solution dumps.
    pub steps: u64,
}

impl Btio {
    /// Bytes of one cell: 5 doubles.
    pub const CELL_BYTES: u64 = 40;

    /// Bytes of the file.
    pub fn file_bytes(&self) -> u64 {
        self.n
            .saturating_mul(self.n)
            .saturating_mul(self.n)
            .saturating_mul(Self::CELL_BYTES)
            .saturating_mul(self.steps)
    }

    /// The benchmark as a job: per process, every step's runs as writes
    /// and a barrier, then every step's runs as reads and a barrier.
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        const WHAT: &str = "BTIO";
        positive(WHAT, "the process count", u64::from(self.processes))?;
        positive(WHAT, "the grid size", self.n)?;
        positive(WHAT, "the step count", self.steps)?;
        let q = (1..=u64::from(self.processes))
            .find(|q| q * q >= u64::from(self.processes))
            .unwrap_or(1);
        if q * q != u64::from(self.processes) {
            return Err(WorkloadError(format!(
                "{WHAT}: {} processes is not a square (BT runs on 9, 16, 25, ...)",
                self.processes
            )));
        }
        if self.n < q {
            return Err(WorkloadError(format!(
                "{WHAT}: a {}³ grid cannot be split over {q} × {q} processes",
                self.n
            )));
        }
        product(WHAT, &[self.file_bytes().max(1)])?;
        let rows = self.n * self.n * self.steps;
        check_ops(
            WHAT,
            rows.saturating_mul(2)
                .saturating_add(2 * u64::from(self.processes)),
        )?;
        let run = self.n * Self::CELL_BYTES;
        let step_bytes = self.n * self.n * run;
        // Owned row span of coordinate block `b` of q over n.
        let span = |b: u64| (b * self.n / q, (b + 1) * self.n / q);
        let processes = (0..u64::from(self.processes))
            .map(|rank| {
                let (y0, y1) = span(rank % q);
                let (z0, z1) = span(rank / q);
                let mut writes = Vec::new();
                for t in 0..self.steps {
                    for z in z0..z1 {
                        for y in y0..y1 {
                            writes.push(WriteRequest {
                                file: self.file,
                                offset: t * step_bytes + (z * self.n + y) * run,
                                len: run,
                            });
                        }
                    }
                }
                let mut ops: Vec<Op> = writes.iter().map(|r| Op::Write(*r)).collect();
                ops.push(Op::Barrier);
                ops.extend(writes.iter().map(|r| Op::Read(*r)));
                ops.push(Op::Barrier);
                ops
            })
            .collect();
        Ok(Job::starting_now(name, processes))
    }
}

/// How [`MpiTileIo::for_total_bytes`] lays the processes' tiles out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileDecomposition {
    /// One tile column, one tile row per process (`tiles_x = 1`,
    /// `tiles_y = processes`): each tile is a contiguous band of the file.
    OneD,
    /// `tiles_x` the divisor of `processes` closest to its square root
    /// (the smaller one on a tie), `tiles_y = processes / tiles_x`. A prime
    /// process count therefore degenerates to [`TileDecomposition::OneD`].
    TwoD,
}

/// The MPI-Tile-IO benchmark (Parallel I/O Benchmarking Consortium): "tile
/// access to a two-dimensional dense dataset. Each process accesses a tile,
/// the size of which is based on the number of elements in a tile and the
/// size of one element" (SSDUP+ §3.4). SSDUP+ ran two instances at once with
/// 16–128 processes, 4 KiB elements and 16 GB each: one 1-D ("x direction
/// set to 1 and the y direction set to the number of processes") and one
/// 2-D (x the square root of the process count, x · y = processes).
///
/// The dataset is `tiles_x × tiles_y` tiles of `tile_elements_x ×
/// tile_elements_y` elements, stored row-major over the whole dataset, so
/// one dataset row is `tiles_x · tile_elements_x · element_bytes` bytes
/// (`dataset_row_bytes`). Process `p` owns the tile in column
/// `p % tiles_x` and row `p / tiles_x` and writes each of its tile's rows,
/// top to bottom, as one request of `tile_elements_x · element_bytes` bytes:
/// consecutive requests of a process are `dataset_row_bytes` apart, and
/// with `tiles_x = 1` they are contiguous. Tiles do not overlap (the
/// benchmark's overlap options are 0, as SSDUP+ mentions none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiTileIo {
    /// File written.
    pub file: FileId,
    /// Number of processes; must equal `tiles_x * tiles_y`.
    pub processes: u32,
    /// Tiles across a dataset row.
    pub tiles_x: u32,
    /// Tiles down the dataset.
    pub tiles_y: u32,
    /// Elements across one tile row (one request).
    pub tile_elements_x: u64,
    /// Rows of elements in one tile (requests per process).
    pub tile_elements_y: u64,
    /// Bytes per element (4 KiB in SSDUP+).
    pub element_bytes: u64,
}

impl MpiTileIo {
    /// A benchmark instance of about `total_bytes`, laid out by
    /// `decomposition`.
    ///
    /// Rounding: the elements per process `E` are `total_bytes /
    /// (processes · element_bytes)` rounded to the nearest integer. The
    /// tile is then made as square as the factors of `E` allow: if `E` has
    /// a divisor `d` with `⌊√E⌋ / 2 ≤ d ≤ ⌊√E⌋` (always when `E` is a power
    /// of two, as at the paper's sizes), the largest such `d` becomes
    /// `tile_elements_y` and `E / d` becomes `tile_elements_x` — exact.
    /// Otherwise `tile_elements_y = ⌊√E⌋` and `tile_elements_x` is
    /// `E / ⌊√E⌋` rounded. In all cases the bytes written differ from
    /// `total_bytes` by at most `processes · element_bytes · (1 + ⌊√E⌋) / 2`
    /// (relatively about `1 / (2√E)`), and `tile_elements_x ≥
    /// tile_elements_y`, so requests are as large as the shape allows.
    ///
    /// Errors if a parameter is 0 or `total_bytes` is below one element per
    /// process.
    pub fn for_total_bytes(
        file: FileId,
        processes: u32,
        decomposition: TileDecomposition,
        element_bytes: u64,
        total_bytes: u64,
    ) -> Result<MpiTileIo, WorkloadError> {
        const WHAT: &str = "MPI-Tile-IO";
        positive(WHAT, "the process count", u64::from(processes))?;
        positive(WHAT, "the element size", element_bytes)?;
        let n = u64::from(processes);
        let unit = product(WHAT, &[n, element_bytes])?;
        if total_bytes < unit {
            return Err(WorkloadError(format!(
                "{WHAT}: {total_bytes} B is less than one {element_bytes} B element for each of \
                 {processes} processes ({unit} B); ask for at least {unit} B or use fewer processes"
            )));
        }
        let elements = div_round(total_bytes, unit);
        let side = elements.isqrt();
        // Each process writes at most `side` rows; refuse before searching
        // divisors of an absurd element count.
        check_ops(WHAT, n.saturating_mul(side))?;
        let (tile_elements_x, tile_elements_y) = match (side.div_ceil(2)..=side)
            .rev()
            .find(|d| elements.is_multiple_of(*d))
        {
            Some(d) => (elements / d, d),
            None => (div_round(elements, side), side),
        };
        let (tiles_x, tiles_y) = match decomposition {
            TileDecomposition::OneD => (1, processes),
            TileDecomposition::TwoD => {
                let root = f64::from(processes).sqrt();
                // INVARIANT: 1 divides every count, so the search finds one;
                // min_by keeps the first (smaller) divisor on a tie.
                let x = (1..=processes)
                    .filter(|d| processes.is_multiple_of(*d))
                    .min_by(|a, b| {
                        (f64::from(*a) - root)
                            .abs()
                            .total_cmp(&(f64::from(*b) - root).abs())
                    })
                    .expect("1 divides every process count");
                (x, processes / x)
            }
        };
        Ok(MpiTileIo {
            file,
            processes,
            tiles_x,
            tiles_y,
            tile_elements_x,
            tile_elements_y,
            element_bytes,
        })
    }

    /// The benchmark as a simulator job: process `p` writes its tile's
    /// rows top to bottom, one [`Op::Write`] per row, no barriers.
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        const WHAT: &str = "MPI-Tile-IO";
        positive(WHAT, "the process count", u64::from(self.processes))?;
        positive(WHAT, "tiles_x", u64::from(self.tiles_x))?;
        positive(WHAT, "tiles_y", u64::from(self.tiles_y))?;
        positive(WHAT, "tile_elements_x", self.tile_elements_x)?;
        positive(WHAT, "tile_elements_y", self.tile_elements_y)?;
        positive(WHAT, "the element size", self.element_bytes)?;
        if u64::from(self.tiles_x) * u64::from(self.tiles_y) != u64::from(self.processes) {
            return Err(WorkloadError(format!(
                "{WHAT}: a {} × {} tile grid has {} tiles but there are {} processes; \
                 each process writes one tile, so make tiles_x × tiles_y equal the process count",
                self.tiles_x,
                self.tiles_y,
                u64::from(self.tiles_x) * u64::from(self.tiles_y),
                self.processes
            )));
        }
        let row_request_bytes = product(WHAT, &[self.tile_elements_x, self.element_bytes])?;
        let dataset_row_bytes = product(WHAT, &[u64::from(self.tiles_x), row_request_bytes])?;
        // The whole dataset must be addressable; every offset below is
        // smaller than this product.
        product(
            WHAT,
            &[
                dataset_row_bytes,
                u64::from(self.tiles_y),
                self.tile_elements_y,
            ],
        )?;
        let n = u64::from(self.processes);
        check_ops(WHAT, n.saturating_mul(self.tile_elements_y))?;
        let tiles_x = u64::from(self.tiles_x);
        let processes = (0..n)
            .map(|p| {
                let (column, row) = (p % tiles_x, p / tiles_x);
                let first_row = row * self.tile_elements_y;
                let column_offset = column * row_request_bytes;
                (0..self.tile_elements_y)
                    .map(|r| {
                        Op::Write(WriteRequest {
                            file: self.file,
                            offset: (first_row + r) * dataset_row_bytes + column_offset,
                            len: row_request_bytes,
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(Job::starting_now(name, processes))
    }
}

/// The HPIO benchmark (Northwestern University), as SSDUP+ §3.3 describes
/// it: "A region is a piece of contiguous data in a file that will be
/// accessed by a process. The region count is the number of regions
/// accessed by a process. Region spacing is the distance between two
/// adjacent regions." SSDUP+ ran 32 processes, region sizes 32–256 KiB,
/// spacing 0, the region count chosen to keep the file around 8 GB, two
/// instances at once: one "c-c" (contiguous in memory and file) and one
/// "c-nc" (contiguous in memory, non-contiguous in file).
///
/// Each process writes `region_count` regions, one request per region, in
/// ascending file order. With `stride = region_bytes + region_spacing_bytes`:
/// * `file_contiguous` ("c-c"): process `p`'s regions lie back to back in
///   its own block, region `k` at `(p · region_count + k) · stride`;
/// * not `file_contiguous` ("c-nc"): the processes' regions interleave,
///   region `k` of process `p` at `(k · processes + p) · stride`.
///
/// Either way the written regions, sorted, are exactly
/// `region_spacing_bytes` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hpio {
    /// File written.
    pub file: FileId,
    /// Number of processes.
    pub processes: u32,
    /// Bytes per region (one request).
    pub region_bytes: u64,
    /// Regions per process.
    pub region_count: u64,
    /// Unwritten bytes between adjacent regions.
    pub region_spacing_bytes: u64,
    /// Whether each process's regions form its own block ("c-c") rather
    /// than interleaving with the other processes' ("c-nc").
    pub file_contiguous: bool,
}

impl Hpio {
    /// A benchmark instance with spacing 0 whose file is about
    /// `total_bytes` (SSDUP+: "The region count varied from region size to
    /// keep the file size to be around 8 GB").
    ///
    /// Rounding: `region_count` is `total_bytes / (processes ·
    /// region_bytes)` rounded to the nearest integer, so the file differs
    /// from `total_bytes` by at most `processes · region_bytes / 2` (and is
    /// exact when `total_bytes` is a multiple of that product).
    ///
    /// Errors if a parameter is 0 or `total_bytes` is below one region per
    /// process.
    pub fn for_total_bytes(
        file: FileId,
        processes: u32,
        region_bytes: u64,
        total_bytes: u64,
        file_contiguous: bool,
    ) -> Result<Hpio, WorkloadError> {
        const WHAT: &str = "HPIO";
        positive(WHAT, "the process count", u64::from(processes))?;
        positive(WHAT, "the region size", region_bytes)?;
        let unit = product(WHAT, &[u64::from(processes), region_bytes])?;
        if total_bytes < unit {
            return Err(WorkloadError(format!(
                "{WHAT}: {total_bytes} B is less than one {region_bytes} B region for each of \
                 {processes} processes ({unit} B); ask for at least {unit} B, use smaller regions \
                 or fewer processes"
            )));
        }
        Ok(Hpio {
            file,
            processes,
            region_bytes,
            region_count: div_round(total_bytes, unit),
            region_spacing_bytes: 0,
            file_contiguous,
        })
    }

    /// The benchmark as a simulator job: per process, its regions in
    /// ascending file order, one [`Op::Write`] each, no barriers.
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        const WHAT: &str = "HPIO";
        positive(WHAT, "the process count", u64::from(self.processes))?;
        positive(WHAT, "the region size", self.region_bytes)?;
        positive(WHAT, "the region count", self.region_count)?;
        let stride = self
            .region_bytes
            .checked_add(self.region_spacing_bytes)
            .ok_or_else(|| {
                WorkloadError(format!(
                    "{WHAT}: region size + spacing ({} B + {} B) overflows 64 bits; \
                     use smaller sizes",
                    self.region_bytes, self.region_spacing_bytes
                ))
            })?;
        let n = u64::from(self.processes);
        // Every region starts below this extent.
        product(WHAT, &[n, self.region_count, stride])?;
        check_ops(WHAT, n.saturating_mul(self.region_count))?;
        let processes = (0..n)
            .map(|p| {
                (0..self.region_count)
                    .map(|k| {
                        let slot = if self.file_contiguous {
                            p * self.region_count + k
                        } else {
                            k * n + p
                        };
                        Op::Write(WriteRequest {
                            file: self.file,
                            offset: slot * stride,
                            len: self.region_bytes,
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(Job::starting_now(name, processes))
    }
}

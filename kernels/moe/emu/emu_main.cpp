// emu_main.cpp — the CPU emulator's driver: reads a launch script (written
// by kernels/moe/emu_test.go from the same launch list a CUDA plan runs),
// runs each launch block by block, and saves the buffers asked for.
//
//   buf ID BYTES [FILE]     allocate (from FILE, else filled with 0xff)
//   launch NAME GX GY GZ BX BY BZ SMEM [cN] ARG...   cN: clusters of N blocks
//          along x; ARG: bID (buffer), iN (int) or
//          tID:INNER:ROWS:BOXINNER:BOXROWS (a 2-D bf16 tensor map of buffer ID)
//   save ID FILE
//   stats FILE              per buffer "ID BYTES": what cp.async copies read from it
//
// EMU_SCHED=lowest|highest|random:SEED, EMU_CP=early|late and
// EMU_WG=early|late and EMU_TMA=early|late choose the fiber order, when
// cp.async copies land, when wgmma operations read shared memory and when
// tensor-map copies land (emu.h). Exit 3: the kernel did
// something the hardware would not allow or that cannot finish.
#include "emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <sstream>

#include "../moe.cu"

static emu::Reg reg_align("moe_align", [](void** a) {
    moe_align(*(const int**)a[0], *(int*)a[1], *(int*)a[2], *(int*)a[3], *(int**)a[4], *(int**)a[5], *(int**)a[6],
              *(int*)a[7]);
});
static emu::Reg reg_align_count("moe_align_count", [](void** a) {
    moe_align_count(*(const int**)a[0], *(int*)a[1], *(int*)a[2], *(int**)a[3]);
});
static emu::Reg reg_align_scan("moe_align_scan", [](void** a) {
    moe_align_scan(*(int*)a[0], *(int*)a[1], *(int*)a[2], *(int*)a[3], *(int**)a[4], *(int**)a[5], *(int**)a[6],
                   *(int**)a[7], *(int*)a[8]);
});
static emu::Reg reg_align_scatter("moe_align_scatter", [](void** a) {
    moe_align_scatter(*(const int**)a[0], *(int*)a[1], *(int*)a[2], *(const int**)a[3], *(int**)a[4]);
});
static emu::Reg reg_combine("moe_combine", [](void** a) {
    moe_combine(*(const bf16_t**)a[0], *(const int**)a[1], *(bf16_t**)a[2], *(int*)a[3], *(int*)a[4], *(int*)a[5]);
});

// guarded allocates n bytes ending 0–255 bytes before an inaccessible page,
// 256-byte aligned.
static char* guarded(size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t total = (n + 255) / 256 * 256;
    const size_t pages = (total + page - 1) / page;
    char* m = (char*)mmap(nullptr, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) emu::fail("mmap failed%s");
    if (mprotect(m + pages * page, page, PROT_NONE) != 0) emu::fail("mprotect failed%s");
    return m + pages * page - total;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: emu SCRIPT\n");
        return 2;
    }
    if (const char* s = std::getenv("EMU_SCHED")) {
        std::string v = s;
        if (v == "highest")
            emu::sched = 1;
        else if (v.rfind("random:", 0) == 0) {
            emu::sched = 2;
            emu::rng.seed((unsigned)std::atoi(v.c_str() + 7));
        }
    }
    if (const char* s = std::getenv("EMU_CP")) emu::cp_late = std::string(s) == "late";
    if (const char* s = std::getenv("EMU_WG")) emu::wg_late = std::string(s) == "late";
    if (const char* s = std::getenv("EMU_TMA")) emu::tma_late = std::string(s) == "late";

    std::ifstream in(argv[1]);
    if (!in) {
        std::fprintf(stderr, "emu: cannot read %s\n", argv[1]);
        return 2;
    }
    std::map<int, emu::Buffer> bufs;
    std::map<int, size_t> index;  // a buffer's place in emu::buffers
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        std::istringstream ls(line);
        std::string cmd;
        if (!(ls >> cmd) || cmd[0] == '#') continue;
        if (cmd == "buf") {
            int id;
            size_t n;
            std::string file;
            ls >> id >> n >> file;
            char* p = guarded(n);
            std::memset(p, 0xff, n);
            if (!file.empty()) {
                std::ifstream f(file, std::ios::binary);
                if (!f.read(p, (std::streamsize)n)) {
                    std::fprintf(stderr, "emu: line %d: reading %zu bytes from %s failed\n", lineno, n, file.c_str());
                    return 2;
                }
            }
            bufs[id] = emu::Buffer{p, n};
            index[id] = emu::buffers.size();
            emu::buffers.push_back(bufs[id]);
            emu::cp_read.push_back(0);
        } else if (cmd == "launch") {
            std::string name;
            emu::Dim3 grid, block;
            size_t smem;
            ls >> name >> grid.x >> grid.y >> grid.z >> block.x >> block.y >> block.z >> smem;
            auto it = emu::registry().find(name);
            if (it == emu::registry().end()) {
                std::fprintf(stderr, "emu: line %d: no kernel %s\n", lineno, name.c_str());
                return 2;
            }
            std::vector<char*> ptrs;
            std::vector<int> ints;
            std::deque<TmaDesc> tmaps;  // stable addresses for the arguments
            std::vector<std::pair<char, int>> order;
            std::string a;
            int csize = 1;
            while (ls >> a) {
                if (a[0] == 'c') {
                    csize = std::atoi(a.c_str() + 1);
                    if (csize < 1 || csize > 8 || grid.x % (unsigned)csize != 0) {
                        std::fprintf(stderr, "emu: line %d: cluster of %d blocks for a grid of %u\n", lineno, csize, grid.x);
                        return 2;
                    }
                } else if (a[0] == 'b') {
                    int id = std::atoi(a.c_str() + 1);
                    if (!bufs.count(id)) {
                        std::fprintf(stderr, "emu: line %d: no buffer %d\n", lineno, id);
                        return 2;
                    }
                    ptrs.push_back(bufs[id].p);
                    order.push_back({'b', (int)ptrs.size() - 1});
                } else if (a[0] == 't') {
                    int id = 0;
                    long long inner = 0, rows = 0;
                    int bi = 0, br = 0;
                    if (std::sscanf(a.c_str() + 1, "%d:%lld:%lld:%d:%d", &id, &inner, &rows, &bi, &br) != 5 || !bufs.count(id)) {
                        std::fprintf(stderr, "emu: line %d: bad tensor map %s\n", lineno, a.c_str());
                        return 2;
                    }
                    if ((size_t)(inner * rows * 2) > bufs[id].n) {
                        std::fprintf(stderr, "emu: line %d: tensor map %s larger than buffer %d\n", lineno, a.c_str(), id);
                        return 2;
                    }
                    tmaps.push_back(TmaDesc{bufs[id].p, inner, rows, bi, br});
                    order.push_back({'t', (int)tmaps.size() - 1});
                } else {
                    ints.push_back(std::atoi(a.c_str() + 1));
                    order.push_back({'i', (int)ints.size() - 1});
                }
            }
            std::vector<void*> args;
            for (auto& o : order)
                args.push_back(o.first == 'b' ? (void*)&ptrs[o.second] : o.first == 't' ? (void*)&tmaps[o.second] : (void*)&ints[o.second]);
            emu::dyn_bytes = std::max<size_t>(smem, 16);
            std::vector<char*> smems;
            for (int r = 0; r < csize; ++r) smems.push_back(guarded(emu::dyn_bytes));
            emu::grid_dim = grid;
            emu::block_dim = block;
            emu::Invoker f = it->second;
            emu::body = [&] { f(args.data()); };
            const int threads = (int)(block.x * block.y * block.z);
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; x += (unsigned)csize) {
                        std::vector<emu::Dim3> idx;
                        for (int r = 0; r < csize; ++r) idx.push_back(emu::Dim3{x + (unsigned)r, y, z});
                        emu::run_cluster(threads, idx, smems);
                    }
        } else if (cmd == "poison") {
            // poison ID: NaN bytes over a buffer again (a second pass must
            // write it anew).
            int id;
            ls >> id;
            if (!bufs.count(id)) {
                std::fprintf(stderr, "emu: line %d: no buffer %d\n", lineno, id);
                return 2;
            }
            std::memset(bufs[id].p, 0xff, bufs[id].n);
        } else if (cmd == "save") {
            int id;
            std::string file;
            ls >> id >> file;
            std::ofstream f(file, std::ios::binary);
            f.write(bufs[id].p, (std::streamsize)bufs[id].n);
            if (!f) {
                std::fprintf(stderr, "emu: line %d: writing %s failed\n", lineno, file.c_str());
                return 2;
            }
        } else if (cmd == "stats") {
            std::string file;
            ls >> file;
            std::ofstream f(file);
            for (const auto& [id, i] : index) f << id << " " << emu::cp_read[i] << "\n";
            if (!f) {
                std::fprintf(stderr, "emu: line %d: writing %s failed\n", lineno, file.c_str());
                return 2;
            }
        } else {
            std::fprintf(stderr, "emu: line %d: unknown command %s\n", lineno, cmd.c_str());
            return 2;
        }
    }
    return 0;
}

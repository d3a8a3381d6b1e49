// emu_symbol.h: names from addresses, for error messages. Kernels are usually static or templates,
// so they are not in the dynamic symbol table that dladdr reads; this reads the module's ELF
// .symtab from its file instead (present unless the binary was stripped) and demangles the name.
// emu_symbol_name: the function containing an address (a kernel). emu_elf_symbols: every symbol of
// a file, for racecheck (emu_racecheck.h), which names static __shared__ arrays from their
// thread-local symbols. Only called on error paths and once at startup.
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <cxxabi.h>

// calls fn(ctx, symbol, name) for every symbol of the .symtab of the ELF file at path, until fn
// returns false. Returns false if the file cannot be read or has no .symtab.
EMU_NOTSAN static inline bool emu_elf_symbols(const char* path, bool (*fn)(void* ctx, const Elf64_Sym* sym, const char* name),
                                              void* ctx) {
    if (path == NULL || path[0] == '\0') return false;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return false;
    }
    size_t fsize = (size_t)st.st_size;
    const unsigned char* f = (const unsigned char*)mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == (const unsigned char*)MAP_FAILED) return false;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)f;
    bool found = false;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) <= fsize) {
        const Elf64_Shdr* sh = (const Elf64_Shdr*)(f + eh->e_shoff);
        bool go = true;
        for (int s = 0; s < eh->e_shnum && go; s++) {
            if (sh[s].sh_type != SHT_SYMTAB || sh[s].sh_link >= eh->e_shnum) continue;
            const Elf64_Shdr* strh = &sh[sh[s].sh_link];
            if (sh[s].sh_offset + sh[s].sh_size > fsize || strh->sh_offset + strh->sh_size > fsize) continue;
            found = true;
            const Elf64_Sym* sym = (const Elf64_Sym*)(f + sh[s].sh_offset);
            size_t nsym = sh[s].sh_size / sizeof(Elf64_Sym);
            const char* strtab = (const char*)(f + strh->sh_offset);
            for (size_t i = 0; i < nsym && go; i++) {
                if (sym[i].st_name >= strh->sh_size) continue;
                go = fn(ctx, &sym[i], strtab + sym[i].st_name);
            }
        }
    }
    munmap((void*)f, fsize);
    return found;
}

// the demangled form of a symbol name into out (the name itself if it is not mangled)
EMU_NOTSAN static inline void emu_demangle(const char* name, char* out, size_t outn) {
    int status = 0;
    char* dem = abi::__cxa_demangle(name, NULL, NULL, &status);
    snprintf(out, outn, "%s", (status == 0 && dem != NULL) ? dem : name);
    free(dem);
}

struct EmuFuncQuery {
    uintptr_t off;   // the address, relative to the module's base for a position-independent module
    char found[1024];
};
EMU_NOTSAN static inline bool emu_func_at(void* ctx, const Elf64_Sym* sym, const char* name) {
    EmuFuncQuery* q = (EmuFuncQuery*)ctx;
    if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC) return true;
    uintptr_t lo = sym->st_value, hi = lo + (sym->st_size ? sym->st_size : 1);
    if (q->off < lo || q->off >= hi) return true;
    snprintf(q->found, sizeof(q->found), "%s", name);
    return false;
}

// writes the demangled name of the function containing addr into out; returns false if unknown
EMU_NOTSAN static inline bool emu_symbol_name(const void* addr, char* out, size_t outn) {
    if (outn == 0) return false;
    out[0] = '\0';
    Dl_info info;
    memset(&info, 0, sizeof(info));
    if (dladdr(addr, &info) == 0) return false;
    EmuFuncQuery q;
    q.found[0] = '\0';
    if (info.dli_sname != NULL && info.dli_saddr == addr) {
        snprintf(q.found, sizeof(q.found), "%s", info.dli_sname);
    } else {
        // the module's own .symtab (the main program: /proc/self/exe)
        const Elf64_Ehdr* mh = (const Elf64_Ehdr*)info.dli_fbase;  // the module's mapped ELF header
        q.off = (uintptr_t)addr - (mh != NULL && mh->e_type == ET_DYN ? (uintptr_t)info.dli_fbase : 0);
        const char* paths[2] = {info.dli_fname, "/proc/self/exe"};
        for (int pi = 0; pi < 2 && q.found[0] == '\0'; pi++) emu_elf_symbols(paths[pi], emu_func_at, &q);
    }
    if (q.found[0] == '\0') return false;
    emu_demangle(q.found, out, outn);
    return true;
}

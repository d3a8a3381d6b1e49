// emu_symbol.h: the name of a kernel from its address, for error messages. Kernels are usually
// static or templates, so they are not in the dynamic symbol table that dladdr reads; this reads
// the module's ELF .symtab from its file instead (present unless the binary was stripped) and
// demangles the name. Only called on the error path.
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <cxxabi.h>

// writes the demangled name of the function containing addr into out; returns false if unknown
static inline bool emu_symbol_name(const void* addr, char* out, size_t outn) {
    if (outn == 0) return false;
    out[0] = '\0';
    Dl_info info;
    memset(&info, 0, sizeof(info));
    if (dladdr(addr, &info) == 0) return false;
    char found[1024];
    found[0] = '\0';
    if (info.dli_sname != NULL && info.dli_saddr == addr) {
        snprintf(found, sizeof(found), "%s", info.dli_sname);
    } else {
        // read .symtab of the module's file (the main program: /proc/self/exe)
        const char* paths[2] = {info.dli_fname, "/proc/self/exe"};
        for (int pi = 0; pi < 2 && found[0] == '\0'; pi++) {
            if (paths[pi] == NULL || paths[pi][0] == '\0') continue;
            int fd = open(paths[pi], O_RDONLY);
            if (fd < 0) continue;
            struct stat st;
            if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) { close(fd); continue; }
            size_t fsize = (size_t)st.st_size;
            const unsigned char* f = (const unsigned char*)mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0);
            close(fd);
            if (f == (const unsigned char*)MAP_FAILED) continue;
            const Elf64_Ehdr* eh = (const Elf64_Ehdr*)f;
            bool ok = memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
                      eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) <= fsize;
            if (ok) {
                uintptr_t off = (uintptr_t)addr - (eh->e_type == ET_DYN ? (uintptr_t)info.dli_fbase : 0);
                const Elf64_Shdr* sh = (const Elf64_Shdr*)(f + eh->e_shoff);
                for (int s = 0; s < eh->e_shnum && found[0] == '\0'; s++) {
                    if (sh[s].sh_type != SHT_SYMTAB || sh[s].sh_link >= eh->e_shnum) continue;
                    const Elf64_Shdr* strh = &sh[sh[s].sh_link];
                    if (sh[s].sh_offset + sh[s].sh_size > fsize || strh->sh_offset + strh->sh_size > fsize) continue;
                    const Elf64_Sym* sym = (const Elf64_Sym*)(f + sh[s].sh_offset);
                    size_t nsym = sh[s].sh_size / sizeof(Elf64_Sym);
                    const char* strtab = (const char*)(f + strh->sh_offset);
                    for (size_t i = 0; i < nsym; i++) {
                        if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || sym[i].st_name >= strh->sh_size) continue;
                        uintptr_t lo = sym[i].st_value, hi = lo + (sym[i].st_size ? sym[i].st_size : 1);
                        if (off >= lo && off < hi) {
                            snprintf(found, sizeof(found), "%s", strtab + sym[i].st_name);
                            break;
                        }
                    }
                }
            }
            munmap((void*)f, fsize);
        }
    }
    if (found[0] == '\0') return false;
    int status = 0;
    char* dem = abi::__cxa_demangle(found, NULL, NULL, &status);
    snprintf(out, outn, "%s", (status == 0 && dem != NULL) ? dem : found);
    free(dem);
    return true;
}

//! The manylinux policy table: auditwheel 6.8.2's `manylinux-policy.json`
//! (pypa/auditwheel, MIT; the file in the `auditwheel` 6.8.2 wheel on PyPI),
//! its x86_64 and aarch64 rows, written as Rust data: per policy its name, its
//! legacy alias (PEP 600), the symbol versions it allows per family (GLIBC,
//! GLIBCXX, CXXABI, GCC, ZLIB, LIBATOMIC; one space-separated list each, exactly
//! as auditwheel lists them), the libraries it allows, and the symbols it
//! forbids per library. Newest auditwheel policies are appended here when
//! auditwheel adds them (the test `table_is_ordered` keeps the order).
//! Data only: the rules are in `super`.

/// One policy row.
pub struct Row {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    /// auditwheel's priority: higher is older (more machines); 0 is plain `linux`.
    pub priority: u32,
    /// (architecture, [(family, space-separated versions)]).
    pub versions: &'static [(&'static str, &'static [(&'static str, &'static str)])],
    pub libraries: &'static [&'static str],
    /// (library, forbidden symbols).
    pub blacklist: &'static [(&'static str, &'static [&'static str])],
}

pub static POLICIES: &[Row] = &[
    Row {
        name: "manylinux_2_5",
        alias: Some("manylinux1"),
        priority: 100,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8"),
                ("LIBATOMIC", ""),
                ("ZLIB", ""),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libz.so.1"],
        blacklist: &[
            ("libc.so.6", &["__cxa_thread_atexit_impl", "__issignaling", "__issignalingf", "__issignalingl", "pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libm.so.6", &["__issignaling", "__issignalingf", "__issignalingl"]),
            ("libpthread.so.0", &["pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_12",
        alias: Some("manylinux2010"),
        priority: 90,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13"),
                ("LIBATOMIC", ""),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libc.so.6", &["__cxa_thread_atexit_impl", "__issignaling", "__issignalingf", "__issignalingl", "pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libm.so.6", &["__issignaling", "__issignalingf", "__issignalingl"]),
            ("libpthread.so.0", &["pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_17",
        alias: Some("manylinux2014"),
        priority: 80,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19"),
                ("LIBATOMIC", ""),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0"),
                ("GLIBC", "2.0 2.17 2.18"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19"),
                ("LIBATOMIC", "1.0"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libc.so.6", &["__cxa_thread_atexit_impl", "__issignaling", "__issignalingf", "__issignalingl", "pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libm.so.6", &["__issignaling", "__issignalingf", "__issignalingl"]),
            ("libpthread.so.0", &["pthread_getattr_default_np", "pthread_setattr_default_np"]),
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_24",
        alias: None,
        priority: 70,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_26",
        alias: None,
        priority: 68,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_27",
        alias: None,
        priority: 65,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_28",
        alias: None,
        priority: 64,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_31",
        alias: None,
        priority: 61,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "uncompress2", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_34",
        alias: None,
        priority: 58,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_35",
        alias: None,
        priority: 57,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "bi_windup", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "crc_fold_512to32", "crc_fold_copy", "crc_fold_init", "deflate_copyright", "deflate_medium", "fill_window", "flush_pending", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "longest_match", "slide_hash_sse", "static_ltree", "x86_check_features", "x86_cpu_has_pclmul", "x86_cpu_has_sse2", "x86_cpu_has_sse42", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_36",
        alias: None,
        priority: 56,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_combine_gen", "crc32_combine_gen64", "crc32_combine_op", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_37",
        alias: None,
        priority: 55,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_38",
        alias: None,
        priority: 54,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_39",
        alias: None,
        priority: 53,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0 13.0.0 14.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0 13.0.0 14.0 14.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_40",
        alias: None,
        priority: 52,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0 13.0.0 14.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 2.40 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0 13.0.0 14.0 14.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 2.40 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
    Row {
        name: "manylinux_2_41",
        alias: None,
        priority: 51,
        versions: &[
            ("x86_64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 FLOAT128 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.7.0 4.8.0 7.0.0 12.0.0 13.0.0 14.0.0"),
                ("GLIBC", "2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 2.40 2.41 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
            ("aarch64", &[
                ("CXXABI", "1.3 1.3.1 1.3.2 1.3.3 1.3.4 1.3.5 1.3.6 1.3.7 1.3.8 1.3.9 1.3.10 1.3.11 1.3.12 1.3.13 1.3.14 1.3.15 TM_1"),
                ("GCC", "3.0 3.3 3.3.1 3.4 3.4.2 3.4.4 4.0.0 4.2.0 4.3.0 4.5.0 4.7.0 7.0.0 11.0 13.0.0 14.0 14.0.0"),
                ("GLIBC", "2.0 2.17 2.18 2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.31 2.32 2.33 2.34 2.35 2.36 2.38 2.39 2.40 2.41 ABI_DT_RELR"),
                ("GLIBCXX", "3.4 3.4.1 3.4.2 3.4.3 3.4.4 3.4.5 3.4.6 3.4.7 3.4.8 3.4.9 3.4.10 3.4.11 3.4.12 3.4.13 3.4.14 3.4.15 3.4.16 3.4.17 3.4.18 3.4.19 3.4.20 3.4.21 3.4.22 3.4.23 3.4.24 3.4.25 3.4.26 3.4.27 3.4.28 3.4.29 3.4.30 3.4.31 3.4.32 3.4.33"),
                ("LIBATOMIC", "1.0 1.1 1.2"),
                ("ZLIB", "1.2.0 1.2.0.2 1.2.0.8 1.2.2 1.2.2.3 1.2.2.4 1.2.3.3 1.2.3.4 1.2.3.5 1.2.5.1 1.2.5.2 1.2.7.1 1.2.9 1.2.12"),
            ]),
        ],
        libraries: &["libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1"],
        blacklist: &[
            ("libz.so.1", &["_dist_code", "_length_code", "_tr_align", "_tr_flush_block", "_tr_init", "_tr_stored_block", "_tr_tally", "adler32_default", "crc32_acle", "crc32_le_vgfm_16", "crc32_neon", "crc32_vpmsum", "crc32_z_default", "deflate_copyright", "gzflags", "inflate_copyright", "inflate_fast", "inflate_table", "sse2_slide_hash", "z_errmsg", "z_vstring", "zcalloc", "zcfree"]),
        ],
    },
];

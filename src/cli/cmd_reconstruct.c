/* cmd_reconstruct.c — `ssb4d reconstruct DATA`: calibrate (what is not given), build G, SSB at the
 * given aberrations, write the phase image and print the loss. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/err.h"
#include "fit/fit.h"
#include "gbuild/gbuild.h"
#include "io/image.h"
#include "io/npy.h"
#include "plan/plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum {
    OPT_C10 = CLI_OPT_FIRST_FREE, OPT_C12, OPT_PHI12, OPT_ABERR, OPT_UPSAMPLE, OPT_ESTIMATOR, OPT_PATH,
    OPT_TILT, OPT_THICKNESS, OPT_OBJECT, OPT_BLOCK_MB, OPT_FORCE, OPT_VERBOSE
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ssb4d reconstruct DATA [options]\n\n"
            "Builds G(q,k) from DATA (a .qem from ssb4d import, or .npy counts, uint8/16/32, shape\n"
            "scan_row x scan_col x det_row x det_col),\n"
            "applies the aberration-corrected single-side-band correction and writes the phase image.\n\n"
            "aberrations (default: those of --calibration, else the simulator's truth from the sidecar, else 0;\n"
            "the thick model likewise from --calibration, else none):\n"
            "  --c10 NM              defocus coefficient C10 (nm; C10 = -defocus)\n"
            "  --c12 NM              two-fold astigmatism C12 (nm)\n"
            "  --phi12 DEG           its angle (degrees)\n"
            "  --aberr LIST          any of the 14 coefficients, e.g. C30=1000,C32=50,phi32=20 (nm, deg)\n"
            "  --tilt ROW,COL        thick-sample tilt (mrad), with --thickness\n"
            "  --thickness NM        thick-sample model thickness (nm); 0 = standard SSB\n\n"
            "output:\n"
            "  -o, --output FILE     phase image: .tiff (float32), .npy or .png (default phase.tiff);\n"
            "                        a .png is an 8-bit preview with a scale bar and a colour bar (rad)\n"
            "  --object FILE         also write the complex object (.npy complex64)\n"
            "  --force               replace the phase image and --object FILE if they exist\n"
            "                        (without it an existing one is refused before any work)\n"
            "  --upsample F          1, 2, 3, 4, 8 or auto (default 1)\n"
            "  --estimator E         phase-of-mean (default) or mean-phase\n"
            "  --path P              auto (default) or real: the real-output path; complex: full-plane\n"
            "                        transforms (same results to rounding, for checks)\n"
            "  --block-mb N          decoded block size for the G build (MiB); overrides the block\n"
            "                        the --memory plan picks (256 MiB, less under a small budget)\n"
            "  --verbose             also the loss's computation path and time\n\n"
            "memory: the budget (--memory, default the available RAM) counts a .qem DATA (it stays\n"
            "mapped), the output images, G and every transient. When G does not fit, its outer BF\n"
            "pixels are streamed (rebuilt from DATA by every pass): slower, same bits. A budget below\n"
            "the smallest that runs exits 2 with that smallest budget (see also ssb4d plan).\n\n%s\n"
            CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

static const char *path_name(int real) { return real ? "real" : "complex"; }

int cmd_reconstruct(int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_MICROSCOPE_OPTIONS,
        {"c10", required_argument, 0, OPT_C10},
        {"c12", required_argument, 0, OPT_C12},
        {"phi12", required_argument, 0, OPT_PHI12},
        {"aberr", required_argument, 0, OPT_ABERR},
        {"upsample", required_argument, 0, OPT_UPSAMPLE},
        {"estimator", required_argument, 0, OPT_ESTIMATOR},
        {"path", required_argument, 0, OPT_PATH},
        {"tilt", required_argument, 0, OPT_TILT},
        {"thickness", required_argument, 0, OPT_THICKNESS},
        {"object", required_argument, 0, OPT_OBJECT},
        {"block-mb", required_argument, 0, OPT_BLOCK_MB},
        {"force", no_argument, 0, OPT_FORCE},
        {"verbose", no_argument, 0, OPT_VERBOSE},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_micro m;
    cli_micro_init(&m);
    ssb4d_aberrations ab_flags;
    memset(&ab_flags, 0, sizeof ab_flags);
    unsigned c_mask = 0, phi_mask = 0;
    const char *out_path = "phase.tiff", *object_path = NULL;
    int upsample = 1, upsample_auto = 0, mean_phase = 0, force = 0, verbose = 0;
    ssb4d_path path = SSB4D_PATH_AUTO;
    ssb4d_thick thick = {{0, 0}, 0};
    int tilt_given = 0, thickness_given = 0;
    double block_mb = 0; /* 0: the plan's */
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        double v;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'o': out_path = optarg; break;
        case OPT_OBJECT: object_path = optarg; break;
        case OPT_FORCE: force = 1; break;
        case OPT_VERBOSE: verbose = 1; break;
        case OPT_C10:
        case OPT_C12:
        case OPT_PHI12:
            if (cli_parse_double(optarg, &v)) {
                fprintf(stderr, "ssb4d reconstruct: invalid number '%s'\n", optarg);
                return CLI_EXIT_USAGE;
            }
            if (c == OPT_C10) {
                ab_flags.C_nm[SSB4D_C10] = v;
                c_mask |= 1u << SSB4D_C10;
            } else if (c == OPT_C12) {
                ab_flags.C_nm[SSB4D_C12] = v;
                c_mask |= 1u << SSB4D_C12;
            } else {
                ab_flags.phi_deg[SSB4D_C12] = v;
                phi_mask |= 1u << SSB4D_C12;
            }
            break;
        case OPT_ABERR:
            if (cli_parse_aberr_list(optarg, &ab_flags, &c_mask, &phi_mask))
                return CLI_EXIT_USAGE;
            break;
        case OPT_UPSAMPLE:
            if (!strcasecmp(optarg, "auto"))
                upsample_auto = 1;
            else if (cli_parse_double(optarg, &v) || (v != 1 && v != 2 && v != 3 && v != 4 && v != 8)) {
                fprintf(stderr, "ssb4d reconstruct: --upsample must be 1, 2, 3, 4, 8 or auto\n");
                return CLI_EXIT_USAGE;
            } else
                upsample = (int)v;
            break;
        case OPT_ESTIMATOR:
            if (!strcmp(optarg, "mean-phase"))
                mean_phase = 1;
            else if (!strcmp(optarg, "phase-of-mean"))
                mean_phase = 0;
            else {
                fprintf(stderr, "ssb4d reconstruct: --estimator must be phase-of-mean or mean-phase\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_PATH:
            if (!strcmp(optarg, "auto"))
                path = SSB4D_PATH_AUTO;
            else if (!strcmp(optarg, "real"))
                path = SSB4D_PATH_REAL;
            else if (!strcmp(optarg, "complex"))
                path = SSB4D_PATH_COMPLEX;
            else {
                fprintf(stderr, "ssb4d reconstruct: --path must be auto, real or complex\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_TILT:
            if (cli_parse_pair(optarg, thick.tilt_mrad) || fabs(thick.tilt_mrad[0]) > 1000 ||
                fabs(thick.tilt_mrad[1]) > 1000) {
                fprintf(stderr, "ssb4d reconstruct: --tilt must be ROW,COL in mrad\n");
                return CLI_EXIT_USAGE;
            }
            tilt_given = 1;
            break;
        case OPT_THICKNESS:
            if (cli_parse_double(optarg, &thick.thickness_nm) || thick.thickness_nm < 0 ||
                thick.thickness_nm > 1e4) {
                fprintf(stderr, "ssb4d reconstruct: --thickness must be >= 0 nm\n");
                return CLI_EXIT_USAGE;
            }
            thickness_given = 1;
            break;
        case OPT_BLOCK_MB:
            if (cli_parse_double(optarg, &block_mb) || !(block_mb > 0) || block_mb > 1e6) {
                fprintf(stderr, "ssb4d reconstruct: --block-mb must be > 0\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case ':':
            fprintf(stderr, "ssb4d reconstruct: option %s needs a value\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d reconstruct: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "ssb4d reconstruct: expected exactly one DATA file (see --help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *data = argv[optind];
    ssb4d_err err = {0};
    if (ssb4d_image_check_path(out_path, &err))
        return cli_error("reconstruct", err.code, err.msg);
    if (object_path && (strlen(object_path) < 4 || strcasecmp(object_path + strlen(object_path) - 4, ".npy"))) {
        fprintf(stderr, "ssb4d reconstruct: --object must name a .npy file\n");
        return CLI_EXIT_USAGE;
    }
    /* A missing DATA is the first thing to say, before any unknown microscope value. */
    int rc = cli_check_readable("reconstruct", data);
    if (!rc)
        rc = cli_auto_calibration("reconstruct", data, &m, m.quiet);
    if (rc)
        return rc;
    /* Then the outputs: an existing one is refused unless --force, before any long work. */
    if ((rc = cli_check_output("reconstruct", out_path, force, ", or -o FILE")) ||
        (object_path && (rc = cli_check_output("reconstruct", object_path, force, ""))))
        return rc;

    cli_values v;
    if ((rc = cli_resolve(data, &m, &v)))
        return rc;
    if ((rc = cli_check_microscope(&v)))
        return rc;
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    const char *ab_source = "zero (none given)";
    if (v.has_ab) {
        ab = v.ab;
        ab_source = v.source;
    }
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        if (c_mask & (1u << i))
            ab.C_nm[i] = ab_flags.C_nm[i];
        if (phi_mask & (1u << i))
            ab.phi_deg[i] = ab_flags.phi_deg[i];
    }
    char ab_source_buf[96];
    if (c_mask || phi_mask) {
        snprintf(ab_source_buf, sizeof ab_source_buf, "flags%s%s", v.has_ab ? " over " : "",
                 v.has_ab ? v.source : "");
        ab_source = ab_source_buf;
    }
    /* The thick model: the calibration file's, each part overridable by its flag. */
    const char *thick_source = "flags";
    if (v.has_thick) {
        if (!tilt_given) {
            thick.tilt_mrad[0] = v.thick.tilt_mrad[0];
            thick.tilt_mrad[1] = v.thick.tilt_mrad[1];
        }
        if (!thickness_given)
            thick.thickness_nm = v.thick.thickness_nm;
        thick_source = (tilt_given || thickness_given) ? "flags over calibration file"
                                                       : "calibration file";
    }
    if (v.ab_from_truth && !(c_mask || phi_mask) && !m.json && !m.quiet)
        fprintf(stderr, "ssb4d reconstruct: using the simulator's true aberrations from the sidecar\n");

    /* Everything large is counted under the budget; the plan made after calibrating sizes the
     * G build (block, group, planes held) so that the job fits, with the same bits for any. */
    size_t budget = cli_memory_budget(&m);
    ssb4d_mem *mem = ssb4d_mem_create(budget);
    if (!mem)
        return cli_error("reconstruct", SSB4D_ENOMEM, "out of memory");
    cli_progress total;
    cli_progress_start(&total, "total", 1);
    ssb4d_source *src = NULL;
    ssb4d_calibration cal;
    memset(&cal, 0, sizeof cal);
    int have_cal = 0, exit_code = 0;
    ssb4d_G *G = NULL;
    float *phase = NULL, *object = NULL;
    size_t encoded = 0, shape[4] = {0};
    ssb4d_plan plan;
    memset(&plan, 0, sizeof plan);
    ssb4d_mem_stage_begin(mem, "load");
    ssb4d_status st = ssb4d_source_open(data, &src, &err);
    size_t qem_bytes = st ? 0 : cli_job_encoded_bytes(data);
    if (qem_bytes && !(st = ssb4d_mem_external(mem, qem_bytes, 1, "the encoded data", &err)))
        encoded = qem_bytes; /* counted: uncounted at the end */
    ssb4d_mem_stage_end(mem);
    if (st) {
        exit_code = cli_job_error("reconstruct", st, err.msg, budget);
        goto out;
    }
    ssb4d_source_shape(src, shape);

    ssb4d_calib_params cp;
    cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &cp);
    if ((exit_code = cli_job_calibrate("reconstruct", src, &cp, mem, encoded, &cal)))
        goto out;
    have_cal = 1;
    ssb4d_geometry g = cal.geom;
    if (upsample_auto)
        upsample = ssb4d_upsample_auto(&g);
    size_t ny = shape[0], nx = shape[1], nyf = ny * (size_t)upsample, nxf = nx * (size_t)upsample;
    size_t image_bytes = nyf * nxf * sizeof *phase, object_bytes = object_path ? 2 * image_bytes : 0;
    static const size_t no_region[2] = {0, 0};
    if ((exit_code = cli_job_plan("reconstruct", &cal, shape, encoded + image_bytes + object_bytes,
                                  isnan(cp.rotation_deg), upsample, no_region, NULL, m.threads, budget, &plan)))
        goto out;

    /* The outputs first: they stay live to the end, as the plan counted them (beside the data). */
    phase = ssb4d_mem_alloc(mem, image_bytes, "the phase image", &err);
    if (phase && object_path)
        object = ssb4d_mem_alloc(mem, object_bytes, "the complex object", &err);
    if (!phase || (object_path && !object)) {
        exit_code = cli_job_error("reconstruct", err.code, err.msg, budget);
        goto out;
    }

    ssb4d_mem_stage_begin(mem, "G build");
    ssb4d_gbuild_opts go;
    plan_gbuild_opts(&plan, 0, plan.fit_resident_bytes, plan.g_bytes, m.threads, &go); /* float32 */
    if (block_mb > 0) /* --block-mb overrides the plan's block */
        go.block_bytes = (size_t)(block_mb * 1048576.0);
    cli_progress pb;
    cli_progress_start(&pb, "G build", m.quiet || m.json);
    go.progress = cli_progress_cb;
    go.progress_user = &pb;
    st = ssb4d_gbuild(src, &g, cal.bf_pix, cal.n_bf, &go, mem, &G, &err);
    cli_progress_done(&pb);
    double t_build = cli_progress_elapsed(&pb);
    ssb4d_mem_stage_end(mem);
    if (st) {
        exit_code = cli_job_error("reconstruct", st, err.msg, budget);
        goto out;
    }

    ssb4d_ssb_opts so;
    ssb4d_ssb_opts_default(&so);
    so.threads = m.threads;
    so.path = path;
    double loss = NAN, t_loss = 0, t_image = 0;
    if (!st) {
        ssb4d_mem_stage_begin(mem, "exact loss");
        cli_progress t;
        cli_progress_start(&t, "loss", 1);
        st = ssb4d_loss(G, &g, &ab, &thick, &so, mem, &loss, (mean_phase && upsample == 1) ? phase : NULL, &err);
        t_loss = cli_progress_elapsed(&t);
        ssb4d_mem_stage_end(mem);
    }
    if (!st) {
        ssb4d_mem_stage_begin(mem, mean_phase ? "mean phase" : "object");
        cli_progress t;
        cli_progress_start(&t, "image", 1);
        if (!mean_phase || object_path)
            st = ssb4d_object(G, &g, &ab, &thick, upsample, &so, mem, object, mean_phase ? NULL : phase, &err);
        if (!st && mean_phase && upsample > 1)
            st = ssb4d_mean_phase_upsampled(G, &g, &ab, &thick, upsample, &so, mem, phase, &err);
        t_image = cli_progress_elapsed(&t);
        ssb4d_mem_stage_end(mem);
    }
    double pixel[2] = {g.scan_step_A[0] / upsample, g.scan_step_A[1] / upsample};
    if (!st) {
        ssb4d_mem_stage_begin(mem, "write");
        st = cli_write_image(out_path, phase, nyf, nxf, pixel, &err);
        if (!st && object_path) {
            size_t oshape[2] = {nyf, nxf};
            st = ssb4d_npy_save(object_path, "<c8", 2, oshape, object, &err);
        }
        ssb4d_mem_stage_end(mem);
    }
    size_t n_resident = ssb4d_G_n_resident(G), n_stored = ssb4d_G_n_stored(G);
    const char *g_mode = n_resident < n_stored ? "streaming" : "resident";
    if (st) {
        exit_code = cli_job_error("reconstruct", st, err.msg, budget);
    } else if (m.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "loss", loss);
        cJSON_AddNumberToObject(o, "loss_n_bf", (double)ssb4d_G_n_bf(G));
        cJSON_AddNumberToObject(o, "n_bf", (double)ssb4d_G_n_bf(G));
        cJSON_AddNumberToObject(o, "n_stored", (double)ssb4d_G_n_stored(G));
        cJSON_AddNumberToObject(o, "seconds", cli_progress_elapsed(&total));
        cJSON_AddNumberToObject(o, "g_build_seconds", t_build);
        cJSON_AddNumberToObject(o, "loss_seconds", t_loss);
        cJSON_AddNumberToObject(o, "image_seconds", t_image);
        cJSON_AddNumberToObject(o, "g_bytes", (double)ssb4d_G_bytes(G));
        cJSON_AddNumberToObject(o, "memory_bytes", (double)budget);
        cJSON_AddStringToObject(o, "g_mode", g_mode);
        cJSON_AddNumberToObject(o, "n_resident", (double)n_resident);
        cJSON_AddNumberToObject(o, "block_bytes", (double)go.block_bytes);
        cJSON_AddNumberToObject(o, "min_memory_bytes", (double)plan.min_memory_bytes);
        cJSON_AddNumberToObject(o, "resident_memory_bytes", (double)plan.resident_memory_bytes);
        cJSON_AddNumberToObject(o, "peak_tracked_bytes", (double)ssb4d_mem_peak(mem));
        cJSON_AddStringToObject(o, "output", out_path);
        if (object_path)
            cJSON_AddStringToObject(o, "object", object_path);
        cJSON_AddStringToObject(o, "estimator", mean_phase ? "mean-phase" : "phase-of-mean");
        cJSON_AddStringToObject(o, "loss_path", path_name(path != SSB4D_PATH_COMPLEX));
        cJSON_AddNumberToObject(o, "upsample", upsample);
        cJSON *sh = cJSON_AddArrayToObject(o, "image_shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)nyf));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)nxf));
        cJSON_AddNumberToObject(o, "pixel_A", pixel[0]);
        cJSON *a = cJSON_AddObjectToObject(o, "aberrations");
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            char key[32];
            if (ab.C_nm[i] == 0 && i > SSB4D_C12)
                continue;
            snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
            cJSON_AddNumberToObject(a, key, ab.C_nm[i]);
            if (ssb4d_aberr_m(i)) {
                snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
                cJSON_AddNumberToObject(a, key, ab.phi_deg[i]);
            }
        }
        cJSON_AddStringToObject(o, "aberrations_source", ab_source);
        if (thick.thickness_nm > 0) {
            cJSON_AddNumberToObject(o, "thickness_nm", thick.thickness_nm);
            cJSON *t = cJSON_AddArrayToObject(o, "tilt_mrad");
            cJSON_AddItemToArray(t, cJSON_CreateNumber(thick.tilt_mrad[0]));
            cJSON_AddItemToArray(t, cJSON_CreateNumber(thick.tilt_mrad[1]));
            cJSON_AddStringToObject(o, "thick_source", thick_source);
        }
        cJSON *ge = cJSON_AddObjectToObject(o, "geometry");
        cJSON_AddNumberToObject(ge, "kv", g.kv);
        cJSON_AddNumberToObject(ge, "semiangle_mrad", g.semiangle_mrad);
        cJSON_AddNumberToObject(ge, "scan_step_row_A", g.scan_step_A[0]);
        cJSON_AddNumberToObject(ge, "scan_step_col_A", g.scan_step_A[1]);
        cJSON_AddNumberToObject(ge, "det_sampling_row_mrad", g.det_sampling_mrad[0]);
        cJSON_AddNumberToObject(ge, "det_sampling_col_mrad", g.det_sampling_mrad[1]);
        cJSON_AddNumberToObject(ge, "centre_row_px", g.centre_px[0]);
        cJSON_AddNumberToObject(ge, "centre_col_px", g.centre_px[1]);
        cJSON_AddNumberToObject(ge, "rotation_deg", g.rotation_deg);
        cJSON_AddNumberToObject(ge, "selection_radius_px", cal.selection_radius_px);
        cJSON_AddNumberToObject(o, "n_flagged", (double)cal.n_flagged);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("data         %s (%zux%zu scan, %zux%zu detector)\n", data, shape[0], shape[1], shape[2], shape[3]);
        printf("geometry     %.1f kV, %.3f mrad, step %.5g x %.5g A, sampling %.5g mrad/px, centre (%.2f, %.2f), rotation %.2f deg\n",
               g.kv, g.semiangle_mrad, g.scan_step_A[0], g.scan_step_A[1], g.det_sampling_mrad[0],
               g.centre_px[0], g.centre_px[1], g.rotation_deg);
        printf("aberrations  C10 %.4f nm, C12 %.4f nm, phi12 %.3f deg (%s)\n", ab.C_nm[SSB4D_C10],
               ab.C_nm[SSB4D_C12], ab.phi_deg[SSB4D_C12], ab_source);
        if (thick.thickness_nm > 0)
            printf("thick model  tilt (%.4g, %.4g) mrad, thickness %.4g nm (%s)\n",
                   thick.tilt_mrad[0], thick.tilt_mrad[1], thick.thickness_nm, thick_source);
        printf("BF pixels    %zu (%zu stored), G %.1f MiB, built in %.3f s\n", ssb4d_G_n_bf(G),
               ssb4d_G_n_stored(G), ssb4d_G_bytes(G) / 1048576.0, t_build);
        char b[32], pk[32];
        printf("memory       budget %s, G %s (%zu of %zu planes held), peak %s tracked\n",
               cli_job_size(b, budget, 0), g_mode, n_resident, n_stored, cli_job_size(pk, ssb4d_mem_peak(mem), 0));
        printf("loss         %.9g (exact SSB loss over all %zu BF pixels, as ssb4d fit reports it", loss,
               ssb4d_G_n_bf(G));
        if (verbose)
            printf("; %s path, %.3f s", path_name(path != SSB4D_PATH_COMPLEX), t_loss);
        printf(")\n");
        printf("phase image  %s (%zux%zu, %s, upsample %d, pixel %.4g A)\n", out_path, nyf, nxf,
               mean_phase ? "mean phase" : "phase of mean", upsample, pixel[0]);
        if (object_path)
            printf("object       %s\n", object_path);
    }
out:
    if (m.memory_report)
        ssb4d_mem_report_print(mem, stderr);
    ssb4d_mem_free(mem, phase, 0);
    ssb4d_mem_free(mem, object, 0);
    ssb4d_G_free(G);
    if (have_cal)
        ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    if (encoded)
        ssb4d_mem_external(mem, encoded, 0, NULL, NULL);
    ssb4d_mem_destroy(mem);
    return exit_code;
}

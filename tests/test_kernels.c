/* test_kernels.c — the engine's own numeric kernels: the vectorisable atan of the real-output path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "ssb/ssb_internal.h"

static void atan_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (double x = -200; x <= 200; x += 3.7e-4) {
        float xf = (float)x;
        double e = fabs((double)ssb_atanf(xf) - atan((double)xf));
        if (e > worst)
            worst = e;
    }
    const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.26794919f, 1e-30f, -1e-30f, 3.7e37f, -3.7e37f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        double e = fabs((double)ssb_atanf(edge[i]) - atan((double)edge[i]));
        if (e > worst)
            worst = e;
    }
    assert_true(worst < 2.5e-7);
    assert_true(signbit(ssb_atanf(-0.0f)));
    float ph[1000];
    for (int i = 0; i < 1000; i++)
        ph[i] = (float)(i - 500) * 0.37f;
    ssb_phases_real(ph, 1000, 0.5f); /* the loop form gives the same bits as the scalar form */
    for (int i = 0; i < 1000; i++)
        assert_true(ph[i] == ssb_atanf((float)(i - 500) * 0.37f * 0.5f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(atan_accuracy)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

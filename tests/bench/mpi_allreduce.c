/* mpi_allreduce.c - OpenMPI's MPI_Allreduce measured the way
 * bench_allreduce measures the collective engine, for a side-by-side
 * figure: fp32 sum, barrier before each iteration, the slowest rank's time
 * counts, median over the iterations, bus bandwidth = size * 2(n-1)/n /
 * time in GB/s.  Built and run by run_bench_allreduce.sh with mpicc and
 * mpirun (not part of the make graph: it needs MPI).
 *   mpirun -np 2 mpi_allreduce LABEL [--quick] [--sizes 64K,1M,16M,64M]
 * prints `mpi_LABEL_busbw_2r_16MiB: 1.8 GB/s` and `mpi_LABEL_time_2r_16MiB: S s`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n, quick = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *label = argc > 1 ? argv[1] : "default";
  char sizes[256] = "64K,1M,16M,64M";
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) snprintf(sizes, sizeof sizes, "%s", argv[++i]);
  }
  for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
    size_t bytes = parse_size(tok), cnt = bytes / sizeof(float);
    float *buf = malloc(bytes);
    for (size_t i = 0; i < cnt; i++) buf[i] = (float)((i + (size_t)rank) % 7) * 0.5f;
    int it = bytes <= (64u << 10) ? 200 : bytes <= (1u << 20) ? 60 : bytes <= (16u << 20) ? 12 : 6;
    if (quick) it = (it + 3) / 4;
    double *t = malloc((size_t)it * sizeof(double));
    for (int w = 0; w < 2; w++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < it; k++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0;
      MPI_Allreduce(&dt, &t[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    if (rank == 0) {
      qsort(t, (size_t)it, sizeof(double), cmp_d);
      double bus = (double)bytes * 2.0 * (n - 1) / n / t[it / 2] / 1e9;
      if (bytes >= (1u << 20)) {
        printf("mpi_%s_busbw_%dr_%zuMiB: %.4f GB/s\n", label, n, bytes >> 20, bus);
        printf("mpi_%s_time_%dr_%zuMiB: %.6f s\n", label, n, bytes >> 20, t[it / 2]);
      } else {
        printf("mpi_%s_busbw_%dr_%zuKiB: %.4f GB/s\n", label, n, bytes >> 10, bus);
        printf("mpi_%s_time_%dr_%zuKiB: %.6f s\n", label, n, bytes >> 10, t[it / 2]);
      }
      fflush(stdout);
    }
    free(t);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}

#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Request r;
    double x = 0;
    MPI_Init(&argc, &argv);
    MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
    return MPI_Finalize();
}

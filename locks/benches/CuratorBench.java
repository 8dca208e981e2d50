// Apache Curator's InterProcessMutex, timed the same way as the Rust rows of
// locks/benches/locks.rs, which compiles and runs this file in the same `cargo bench`
// run, against the same ZooKeeper (Debian's jars: libcurator-recipes-java).
//
//   java CuratorBench <connect> <path> <tasks> <warmup-ms> <measure-ms>
//
// `tasks` threads share one CuratorFramework (one session) and each its own
// InterProcessMutex on `path`. Each loops: note the time, acquire, note the time,
// release (an empty critical section), note the time. After the warm-up it prints one
// line per cycle that started inside the measured window:
//
//   <task> <requested-ns> <acquired-ns> <released-ns>
//
// (System.nanoTime, relative to the window's start). The Rust side derives everything
// from these lines: the uncontended median (tasks = 1), acquisitions per second, the
// spread per task and FIFO overtakes (tasks = 16).
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.util.ArrayList;
import java.util.List;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorBench {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int tasks = Integer.parseInt(args[2]);
        long warmupNs = Long.parseLong(args[3]) * 1_000_000L;
        long measureNs = Long.parseLong(args[4]) * 1_000_000L;

        CuratorFramework client =
            CuratorFrameworkFactory.newClient(connect, 6000, 3000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();

        long start = System.nanoTime() + warmupNs;
        long end = start + measureNs;
        List<List<long[]>> samples = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < tasks; t++) {
            List<long[]> mine = new ArrayList<>();
            samples.add(mine);
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            Thread thread = new Thread(() -> {
                try {
                    while (true) {
                        long requested = System.nanoTime();
                        if (requested >= end) break;
                        mutex.acquire();
                        long acquired = System.nanoTime();
                        mutex.release();
                        long released = System.nanoTime();
                        if (requested >= start) {
                            mine.add(new long[] {requested - start, acquired - start, released - start});
                        }
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) thread.join();

        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out));
        for (int t = 0; t < tasks; t++) {
            for (long[] s : samples.get(t)) {
                out.write(t + " " + s[0] + " " + s[1] + " " + s[2] + "\n");
            }
        }
        out.flush();
        client.close();
    }
}

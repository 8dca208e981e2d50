// Apache Curator's InterProcessMutex on a lock path, driven from a test: the other
// side of the interoperability check between stock-locks' ZooKeeper lock
// (locks/src/zookeeper.rs) and a Java service using Curator.
//
//   java CuratorLock <connect> <path> hold        acquire, print ACQUIRED, hold until
//                                                 stdin closes, release, print RELEASED
//   java CuratorLock <connect> <path> try <ms>    print ACQUIRED (then release) or TIMEOUT
//
// Built and run by app/tests/api/curator.rs with Debian's jars (libcurator-recipes-java).
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        String mode = args[2];
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, 4000, 2000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        if (mode.equals("hold")) {
            mutex.acquire();
            System.out.println("ACQUIRED");
            System.out.flush();
            while (System.in.read() != -1) {
                // hold until the test closes our stdin
            }
            mutex.release();
            System.out.println("RELEASED");
        } else {
            long waitMs = Long.parseLong(args[3]);
            if (mutex.acquire(waitMs, TimeUnit.MILLISECONDS)) {
                System.out.println("ACQUIRED");
                mutex.release();
            } else {
                System.out.println("TIMEOUT");
            }
        }
        System.out.flush();
        client.close();
    }
}

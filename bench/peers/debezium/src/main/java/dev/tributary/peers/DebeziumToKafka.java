package dev.tributary.peers;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import java.io.FileReader;
import java.io.IOException;
import java.io.Reader;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Debezium's PostgreSQL connector in the embedded engine, writing every
 * change event to Kafka: what a user who picks Debezium without Kafka Connect
 * runs. The sink does what Debezium Server's Kafka sink does: a batch is sent
 * asynchronously, the engine waits until Kafka acknowledged all of it, then
 * marks it processed (so the engine's offsets never pass an unacknowledged
 * change).
 *
 * Usage: java -jar peers-debezium.jar CONFIG.properties. Keys starting with
 * "producer." configure the Kafka producer (prefix removed); all others are
 * the engine's and connector's. The process runs until SIGTERM; the bench
 * measures it from outside (/proc, the slot, Kafka's offsets).
 */
public final class DebeziumToKafka {
    private DebeziumToKafka() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: java -jar peers-debezium.jar CONFIG.properties");
            System.exit(2);
        }
        Properties all = load(args[0]);
        Properties engineProps = new Properties();
        Properties producerProps = new Properties();
        for (String k : all.stringPropertyNames()) {
            if (k.startsWith("producer.")) {
                producerProps.setProperty(k.substring("producer.".length()), all.getProperty(k));
            } else {
                engineProps.setProperty(k, all.getProperty(k));
            }
        }
        KafkaProducer<String, String> producer =
                new KafkaProducer<>(producerProps, new StringSerializer(), new StringSerializer());
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        // Set on SIGTERM: a batch cut short by the shutdown is not a failure.
        AtomicBoolean stopping = new AtomicBoolean();
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(engineProps)
                .notifying(new KafkaSink(producer))
                .using((success, message, error) -> {
                    if (!success && !stopping.get()) {
                        failure.set(error != null ? error : new RuntimeException(message));
                        System.err.println("debezium engine stopped: " + message);
                    }
                    stopped.countDown();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            close(engine, executor, producer);
        }));
        executor.execute(engine);
        stopped.await();
        if (failure.get() != null) {
            failure.get().printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    private static Properties load(String path) throws IOException {
        Properties p = new Properties();
        try (Reader r = new FileReader(path)) {
            p.load(r);
        }
        return p;
    }

    private static void close(DebeziumEngine<?> engine, ExecutorService executor,
            KafkaProducer<String, String> producer) {
        try {
            engine.close();
            executor.shutdown();
            executor.awaitTermination(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("close: " + e);
        }
        producer.close();
    }

    /** Sends each batch to Kafka and marks it processed once all of it is acknowledged. */
    static final class KafkaSink implements DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> {
        private final KafkaProducer<String, String> producer;

        KafkaSink(KafkaProducer<String, String> producer) {
            this.producer = producer;
        }

        @Override
        public void handleBatch(List<ChangeEvent<String, String>> records,
                DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) throws InterruptedException {
            CountDownLatch acked = new CountDownLatch(records.size());
            AtomicReference<Exception> failed = new AtomicReference<>();
            for (ChangeEvent<String, String> r : records) {
                producer.send(new ProducerRecord<>(r.destination(), r.key(), r.value()), (meta, err) -> {
                    if (err != null) {
                        failed.compareAndSet(null, err);
                    }
                    acked.countDown();
                });
            }
            acked.await();
            if (failed.get() != null) {
                // Not marked processed: the engine stops and the slot keeps the changes.
                throw new RuntimeException("kafka: " + failed.get(), failed.get());
            }
            for (ChangeEvent<String, String> r : records) {
                committer.markProcessed(r);
            }
            committer.markBatchFinished();
        }
    }
}

// The JavaScript SDK's 7.10 beta (npm alias sb-beta), whose receivers delete messages in
// batches (com.microsoft:batch-delete-messages on $management), against aiosb serve:
// deletes bounded by count and by enqueue time, a locked message left, purge, and the
// limit of a request refused. Prints what each returned, as JSON.
import { ServiceBusClient } from "sb-beta";

const [connection, queue] = process.argv.slice(2);
const client = new ServiceBusClient(connection, { retryOptions: { maxRetries: 0 } });
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const error = async (work) => {
  try {
    return { value: await work() };
  } catch (e) {
    return { code: e.code ?? e.name, message: e.message };
  }
};
try {
  const sender = client.createSender(queue);
  await sender.sendMessages([0, 1, 2, 3, 4].map((i) => ({ body: `old${i}` })));
  await sleep(100);
  const cutoff = new Date();
  await sleep(100);
  await sender.sendMessages([0, 1].map((i) => ({ body: `new${i}` })));
  const receiver = client.createReceiver(queue);
  const three = await receiver.deleteMessages({ maxMessageCount: 3, beforeEnqueueTime: cutoff });
  const rest = await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: cutoff });
  const none = await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: cutoff });
  const left = (await receiver.peekMessages(10)).map((m) => m.body);
  const [locked] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  const purged = await receiver.purgeMessages();
  const afterPurge = (await receiver.peekMessages(10, { fromSequenceNumber: locked.sequenceNumber }))
    .map((m) => m.body);
  await receiver.completeMessage(locked);
  const over = await error(() => receiver.deleteMessages({ maxMessageCount: 501 }));
  const most = await error(() => receiver.deleteMessages({ maxMessageCount: 500 }));
  console.log(JSON.stringify({
    three, rest, none, left, locked: locked.body, purged, afterPurge, over, most,
  }));
} finally {
  await client.close();
}

// A JS session receiver whose batch comes back smaller than asked: the client ends the
// receive with a drain, which it gives 200 ms to be answered before closing the link
// (and with it the session). Then it completes the batch and receives again. Prints the
// bodies, how each completion went, and what the second receive got, as JSON.
import { ServiceBusClient } from "@azure/service-bus";

const [connection, queue] = process.argv.slice(2);
const client = new ServiceBusClient(connection);
const out = {};
try {
  const receiver = await client.acceptSession(queue, "S");
  const got = await receiver.receiveMessages(5, { maxWaitTimeInMs: 1500 });
  out.got = got.map((m) => m.body.toString());
  out.settled = [];
  for (const m of got) {
    try {
      await receiver.completeMessage(m);
      out.settled.push("ok");
    } catch (e) {
      out.settled.push(`${e.code || e.name}: ${String(e.message).slice(0, 90)}`);
    }
  }
  const more = await receiver.receiveMessages(5, { maxWaitTimeInMs: 1000 })
    .catch((e) => `${e.code || e.name}`);
  out.second = Array.isArray(more) ? more.map((m) => m.body.toString()) : more;
  await receiver.close();
} finally {
  await client.close();
}
console.log(JSON.stringify(out));

// The official @azure/service-bus rule manager against aiosb serve's $management nodes
// (add-rule, enumerate-rules, remove-rule): a SQL rule with an action on one subscription,
// a correlation rule on another, $Default deleted from both, then sends that the rules
// route. Prints the rules it listed and the errors it met as JSON.
import { ServiceBusClient } from "@azure/service-bus";

const [connection, topic] = process.argv.slice(2);
const client = new ServiceBusClient(connection);
const codeOf = async (work) => {
  try {
    await work();
    return null;
  } catch (e) {
    return `${e.code}: ${e.message}`;
  }
};
try {
  const eu = client.createRuleManager(topic, "eu");
  const rush = client.createRuleManager(topic, "rush");
  await eu.createRule("eu", { sqlExpression: "region = 'eu'" }, { sqlExpression: "SET tagged = 'yes'" });
  await rush.createRule("rush", { subject: "urgent", applicationProperties: { kind: "rush" } });
  const errors = {
    duplicate: await codeOf(() => eu.createRule("eu", { sqlExpression: "1=1" })),
    badSql: await codeOf(() => eu.createRule("bad", { sqlExpression: "region = = 'eu'" })),
  };
  const before = (await eu.getRules()).map((r) => [r.name, r.filter.sqlExpression, r.action.sqlExpression ?? null]);
  await eu.deleteRule("$Default");
  await rush.deleteRule("$Default");
  errors.missing = await codeOf(() => eu.deleteRule("$Default"));
  const listed = [];
  for await (const r of rush.listRules()) listed.push([r.name, r.filter.subject, r.filter.applicationProperties]);
  const sender = client.createSender(topic);
  await sender.sendMessages([
    { body: "m-eu", applicationProperties: { region: "eu" } },
    { body: "m-us", applicationProperties: { region: "us" } },
    { body: "m-rush", subject: "urgent", applicationProperties: { kind: "rush" } },
    { body: "m-calm", subject: "urgent", applicationProperties: { kind: "calm" } },
  ]);
  await rush.deleteRule("rush");
  await sender.sendMessages({ body: "m-rush-after", subject: "urgent", applicationProperties: { kind: "rush" } });
  await sender.close();
  const after = (await rush.getRules()).map((r) => r.name);
  console.log(JSON.stringify({ before, listed, after, errors }));
} finally {
  await client.close();
}

/**
 * Test helpers: {@link runHandler} runs a handler against a fake lease (no server);
 * {@link startJobwire} starts a real jobwire on free ports for integration tests.
 */
export { fakeLease, runHandler, type FakeLease, type HandlerResult } from "./fake.js";
export {
  freePort,
  healthStatus,
  startJobwire,
  startRedis,
  type JobwireOptions,
  type JobwireServer,
  type RedisServer,
} from "./server.js";

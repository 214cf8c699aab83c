export { makeTestModelCommand } from '../tools/make-test-model.js';

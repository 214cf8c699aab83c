// The package root and the bundled demo model live in loader/ (the LLM class defaults to the model too).
export { defaultModelDir, packageRoot } from '../loader/default-model.js';

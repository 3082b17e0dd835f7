// forge-gpu teleop's page: the socket to the simulating process (same host, the page's token), the frames it
// sends, and the keyboard and gamepad inputs the key map names, sent whenever they change. No library.
"use strict";

const teleop = {
  connected: false, hello: null, status: null, frames: 0, fps: 0, errors: [], closed: false,
  keys: new Set(), pad: {}, sent: "", gamepad: "",
};
window.teleop = teleop;

function $(id) { return document.getElementById(id); }

function socketUrl() {
  const token = new URLSearchParams(location.search).get("token") || "";
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/socket?token=${encodeURIComponent(token)}`;
}

function held() {
  const out = {};
  for (const key of teleop.keys) out[key] = 1;
  for (const [name, value] of Object.entries(teleop.pad)) out[name] = (out[name] || 0) + value;
  return out;
}

function sendHeld(socket) {
  const text = JSON.stringify({ held: held() });
  if (text !== teleop.sent && socket.readyState === WebSocket.OPEN) {
    socket.send(text);
    teleop.sent = text;
  }
}

function showHello(hello) {
  teleop.hello = hello;
  $("task").textContent = hello.task;
  $("directory").textContent = `run: ${hello.directory}`;
  const select = $("cameras");
  select.textContent = "";
  for (const name of hello.cameras) {
    const option = document.createElement("option");
    option.value = option.textContent = name;
    select.appendChild(option);
  }
  select.value = hello.camera;
  const body = $("keytable").querySelector("tbody");
  body.textContent = "";
  for (const row of hello.keys) {
    const tr = document.createElement("tr");
    for (const text of [row.input, row.does]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function showStatus(s) {
  teleop.status = s;
  document.body.dataset.phase = s.phase;
  const phase = { ready: "ready: start it (Enter)", running: "running", ended: `ended (${s.outcome}): keep or discard it` };
  $("phase").textContent = phase[s.phase] || s.phase;
  $("instruction").textContent = s.instruction;
  $("step").textContent = s.step;
  $("max_steps").textContent = s.max_steps;
  $("time").textContent = s.time.toFixed(2);
  $("success").textContent = s.success === null ? "(the task has no success condition)" : (s.success ? "yes" : "not yet");
  $("reward").textContent = s.reward.toFixed(3);
  $("rate").textContent = s.rate;
  $("control_rate").textContent = s.control_rate;
  $("speed").textContent = s.speed;
  $("gripper").textContent = s.gripper;
  $("point").textContent = s.point ? s.point.map((v) => v.toFixed(3)).join(", ") + " m" : "-";
  $("action").textContent = s.action.map((v) => v.toFixed(2)).join(" ");
  $("kept").textContent = s.kept;
  $("discarded").textContent = s.discarded;
  $("note").textContent = s.note;
}

function showFrame(blob) {
  const image = $("camera");
  const old = image.src;
  image.src = URL.createObjectURL(blob);
  if (old) URL.revokeObjectURL(old);
  teleop.frames += 1;
  teleop.recent.push(performance.now());
}
teleop.recent = [];

function countFps() {
  const now = performance.now();
  teleop.recent = teleop.recent.filter((t) => now - t <= 1000);
  teleop.fps = teleop.recent.length;
  $("fps").textContent = teleop.fps;
}

function pollGamepad(socket) {
  const pads = navigator.getGamepads ? Array.from(navigator.getGamepads()).filter((p) => p) : [];
  const pad = pads.find((p) => p.mapping === "standard") || pads[0];
  const now = {};
  if (pad) {
    const known = new Set(teleop.hello ? teleop.hello.inputs : []);
    const deadzone = teleop.hello ? teleop.hello.deadzone : 0.15;
    pad.axes.forEach((value, i) => {
      if (known.has(`axis:${i}`) && Math.abs(value) > deadzone) now[`axis:${i}`] = Math.round(value * 100) / 100;
    });
    pad.buttons.forEach((button, i) => {
      if (known.has(`button:${i}`) && (button.pressed || button.value > 0.5)) now[`button:${i}`] = 1;
    });
    const name = `${pad.id} (${pad.mapping || "non-standard"} layout)`;
    if (name !== teleop.gamepad) $("gamepad").textContent = teleop.gamepad = name;
  }
  teleop.pad = now;
  sendHeld(socket);
  requestAnimationFrame(() => pollGamepad(socket));
}

function connect() {
  const socket = new WebSocket(socketUrl());
  socket.binaryType = "blob";
  teleop.socket = socket;
  socket.onopen = () => {
    teleop.connected = true;
    document.body.dataset.connected = "yes";
  };
  socket.onclose = () => {
    teleop.connected = false;
    document.body.dataset.connected = "closed";
    $("phase").textContent = teleop.closed ? "the run is closed" : "disconnected (the command has ended?)";
  };
  socket.onmessage = (event) => {
    if (typeof event.data !== "string") return showFrame(event.data);
    const message = JSON.parse(event.data);
    if (message.type === "hello") showHello(message);
    else if (message.type === "status") showStatus(message);
    else if (message.type === "closed") teleop.closed = true;
  };
  const known = () => new Set(teleop.hello ? teleop.hello.inputs : []);
  window.addEventListener("keydown", (event) => {
    if (!known().has(event.code) || event.target.tagName === "SELECT") return;
    event.preventDefault();
    if (!event.repeat) {
      teleop.keys.add(event.code);
      sendHeld(socket);
    }
  });
  window.addEventListener("keyup", (event) => {
    if (!teleop.keys.has(event.code)) return;
    event.preventDefault();
    teleop.keys.delete(event.code);
    sendHeld(socket);
  });
  window.addEventListener("blur", () => {
    teleop.keys.clear();
    sendHeld(socket);
  });
  for (const command of ["start", "keep", "discard"]) {
    $(command).addEventListener("click", () => socket.send(JSON.stringify({ command })));
  }
  $("close").addEventListener("click", () => socket.send(JSON.stringify({ close: true })));
  $("cameras").addEventListener("change", (event) => socket.send(JSON.stringify({ camera: event.target.value })));
  setInterval(countFps, 250);
  requestAnimationFrame(() => pollGamepad(socket));
}

window.addEventListener("error", (event) => teleop.errors.push(String(event.message)));
document.addEventListener("DOMContentLoaded", connect);

global.accesskey = "CHANGEIT";
global.worker = "CHANGEIT";
global.path = __dirname;
